"""The listening sockets, bound before the model loads, and the addresses to announce."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from server.config import ServerConfig

WILDCARDS = frozenset({"", "0.0.0.0", "::"})


@dataclass(frozen=True)
class Listeners:
    """The WebSocket/HTTP socket and, when configured, the operational one."""

    main: socket.socket
    ops: socket.socket | None = None

    def close(self) -> None:
        for sock in (self.main, self.ops):
            if sock is not None:
                sock.close()


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on the first address `host` resolves to (OSError if taken)."""
    family, _, _, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    try:
        return socket.create_server(address, family=family, backlog=1024)
    except OSError as exc:
        raise OSError(exc.errno, f"{host}:{port}: {exc.strerror}") from exc


def bind_listeners(config: ServerConfig) -> Listeners:
    """Bind the main port and, if asked, the metrics port (closing the first on failure)."""
    main = bind(config.host, config.port)
    if config.metrics_port is None:
        return Listeners(main)
    try:
        ops = bind(config.host, config.metrics_port)
    except OSError:
        main.close()
        raise
    return Listeners(main, ops)


def bound_port(sock: socket.socket) -> int:
    port: int = sock.getsockname()[1]
    return port


def page_url(config: ServerConfig, port: int) -> str:
    """Where a person on this machine opens the web page (a wildcard host is not a URL)."""
    host = "127.0.0.1" if config.host in WILDCARDS else config.host
    if ":" in host:
        host = f"[{host}]"
    scheme = "https" if config.certfile else "http"
    return f"{scheme}://{host}:{port}/"
