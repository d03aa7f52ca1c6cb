"""Listening sockets and the ASGI server (uvicorn) that serves an app on them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from server.http.addresses import ListenError
from server.http.client_address import ForwardedHeader, TrustedProxies
from server.live.socket_port import TRANSPORT_KEY

log = logging.getLogger("sensestream.server")


def bind(host: str, port: int, send_buffer_bytes: int | None = None) -> list[socket.socket]:
    """Bind every address `host` resolves to (as asyncio does), or raise ListenError.

    Binding comes first, before any model work, so a taken port fails at once. A fixed
    send buffer set here is inherited by every accepted connection (Linux), so TCP pushes
    back on slow readers early.
    """
    sockets: list[socket.socket] = []
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        chosen_port = port
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if send_buffer_bytes is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
            # Port 0 on several addresses: all of them share the first one's port.
            sock.bind((address[0], chosen_port, *address[2:]))
            chosen_port = sock.getsockname()[1]
            sock.listen(1024)
            sock.setblocking(False)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        reason = str(exc.strerror or exc).rsplit(": ", 1)[-1].lower()
        raise ListenError(f"cannot listen on {host}:{port}: {reason}") from exc
    return sockets


def bound_port(sockets: list[socket.socket]) -> int:
    port: int = sockets[0].getsockname()[1]
    return port


class QuietServer(uvicorn.Server):
    """uvicorn without its own signal handling: the app drains first, then stops it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def asgi_server(
    app: Any, trusted_proxies: TrustedProxies | None = None, **options: Any
) -> QuietServer:
    """An ASGI server for `app` that leaves logging and signals to us.

    With `trusted_proxies`, a request from one of them is the client its forwarding headers
    name: `ForwardedHeader` reads X-Forwarded-For (with X-Forwarded-Proto) and RFC 7239
    `Forwarded` together; uvicorn's own reading of X-Forwarded-For is off, so that a
    client's header cannot decide before ours. Without, the peer is the socket's, whatever
    the headers say.
    """
    trusted = trusted_proxies or TrustedProxies()
    config = uvicorn.Config(
        TransportCapture(ForwardedHeader(app, trusted) if trusted else app),
        lifespan="off",
        log_config=None,
        access_log=False,
        # ForwardedHeader reads both forwarding headers, from the socket's peer.
        proxy_headers=False,
        server_header=False,
        ws="websockets-sansio",
        http=PlainPortProtocol,
        **options,
    )
    return QuietServer(config)


#: The first bytes of a TLS ClientHello: a handshake record (0x16) of TLS 1.0-1.3 (0x03).
TLS_RECORD = b"\x16\x03"


class PlainPortProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol, naming a TLS client on a plain port for what it is.

    FunASR's client defaults to `--ssl 1`: against a ws:// port its ClientHello would be
    logged as "Invalid HTTP request received." With TLS configured, uvicorn decrypts
    before this sees anything, so a ClientHello here is always on a plain port.
    """

    _first_data = True

    def data_received(self, data: bytes) -> None:
        first, self._first_data = self._first_data, False
        if first and data.startswith(TLS_RECORD):
            peer = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            log.warning(
                "a TLS client connected to a plain ws:// port from %s: connect with ws:// "
                "(FunASR's client: --ssl 0), or start the server with --certfile and "
                "--keyfile",
                peer,
            )
            self.transport.close()
            return
        super().data_received(data)


def stop_accepting(server: QuietServer) -> None:
    """Take no new connections; those open go on. The sockets may be shared with other
    processes (a supervisor's workers): only this process's copies close, and the kernel
    hands new connections to the others."""
    for listening in server.servers:
        listening.close()


async def stop(server: QuietServer, task: asyncio.Task[None]) -> None:
    server.should_exit = True
    await task


class TransportCapture:
    """Our outermost ASGI layer: hands a WebSocket's transport to the app, for aborts.

    ASGI has no way to drop a connection whose client stopped reading; uvicorn's
    protocol object (the `send` callable's owner) holds the transport that can.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            transport = getattr(getattr(send, "__self__", None), "transport", None)
            if transport is not None:
                extensions = dict(scope.get("extensions") or {})
                extensions[TRANSPORT_KEY] = transport
                scope = {**scope, "extensions": extensions}
        await self.app(scope, receive, send)
