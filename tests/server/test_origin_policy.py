"""The Origin policy on a real server: other sites' pages are refused on every API path.

With the default config (no keys, no `--allowed-origins`), a page the user opens on any
site could otherwise stream into, list, or follow calls from a server on 127.0.0.1.
Requests are sent raw (http.client) so a test can set Host as a DNS-rebound name would.
"""

from __future__ import annotations

import base64
import http.client
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.conftest import ServerProcess

EVIL = "https://evil.example"
#: Every WebSocket path (the streaming routes and the follower route).
WS_PATHS = ("/ws", "/funasr", "/v1/realtime", "/twilio", "/audiohook", "/v1/streams/a-call/events")
#: Every HTTP API path: listing, the file API, stats and metrics (on the main port here),
#: and the plain-GET probe of a streaming path.
HTTP_PATHS = (
    ("GET", "/v1/streams"),
    ("GET", "/v1/models"),
    ("POST", "/v1/audio/transcriptions"),
    ("GET", "/stats"),
    ("GET", "/metrics"),
    ("GET", "/ws"),
)


@pytest.fixture(scope="module")
def open_server(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    """The default config: no keys, no origin list."""
    proc = ServerProcess(tiny_model_dir)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def any_origin_server(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tiny_model_dir, "--allowed-origins", "*")
    yield proc
    proc.stop()


def status(
    port: int,
    path: str,
    *,
    origin: str | None = None,
    host: str | None = None,
    method: str = "GET",
    upgrade: bool = False,
) -> int:
    """The status a request (a WebSocket handshake with `upgrade`) is answered with."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", host or f"127.0.0.1:{port}")
        if origin is not None:
            conn.putheader("Origin", origin)
        if upgrade:
            conn.putheader("Upgrade", "websocket")
            conn.putheader("Connection", "Upgrade")
            conn.putheader("Sec-WebSocket-Key", base64.b64encode(os.urandom(16)).decode())
            conn.putheader("Sec-WebSocket-Version", "13")
        if method == "POST":
            conn.putheader("Content-Length", "0")
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


def test_another_sites_page_is_refused_on_every_api_path(open_server: ServerProcess) -> None:
    port = open_server.port
    seen = {path: status(port, path, origin=EVIL, upgrade=True) for path in WS_PATHS}
    seen |= {
        f"{method} {path}": status(port, path, origin=EVIL, method=method)
        for method, path in HTTP_PATHS
    }
    assert seen == dict.fromkeys(seen, 403)


def test_the_servers_own_page_and_clients_without_an_origin_are_served(
    open_server: ServerProcess,
) -> None:
    port = open_server.port
    own = f"http://127.0.0.1:{port}"
    assert status(port, "/ws", origin=own, upgrade=True) == 101
    assert status(port, "/v1/streams", origin=own) == 200
    assert status(port, "/v1/models", origin=own) == 200
    # The page opened as http://localhost:PORT: browsers resolve localhost themselves.
    local = f"localhost:{port}"
    assert status(port, "/ws", origin=f"http://{local}", host=local, upgrade=True) == 101
    # Scripts and telephony platforms send no Origin at all.
    assert status(port, "/ws", upgrade=True) == 101
    assert status(port, "/v1/streams") == 200


def test_a_name_rebound_to_loopback_is_not_the_servers_own_page(
    open_server: ServerProcess,
) -> None:
    # DNS rebinding: the attacker's name now resolves to 127.0.0.1, so Origin and Host
    # agree; on a loopback listener only loopback names count as the server's own page.
    port = open_server.port
    rebound = f"rebind.evil.example:{port}"
    page = f"http://{rebound}"
    assert status(port, "/ws", origin=page, host=rebound, upgrade=True) == 403
    assert status(port, "/v1/streams", origin=page, host=rebound) == 403
    # Another scheme or port on the same host is another origin too.
    assert status(port, "/ws", origin=f"https://127.0.0.1:{port}", upgrade=True) == 403
    assert status(port, "/ws", origin=f"http://127.0.0.1:{port + 1}", upgrade=True) == 403


def test_a_star_lets_every_origin_in(any_origin_server: ServerProcess) -> None:
    port = any_origin_server.port
    assert status(port, "/ws", origin=EVIL, upgrade=True) == 101
    assert status(port, "/v1/streams", origin=EVIL) == 200
