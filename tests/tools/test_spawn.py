"""The spawner against a stand-in server: port from the first line, readiness from /readyz."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tools.spawn import Address, ServerSpec, SpawnError, spawn

# Stands in for `python -m server`: binds, prints where it listens, floods stderr (more than
# a pipe holds), becomes ready after --ready-after seconds, and never logs "ready in".
FAKE_SERVER = """
import argparse, http.server, signal, sys, threading, time

parser = argparse.ArgumentParser()
parser.add_argument("-m")
parser.add_argument("--port", type=int)
parser.add_argument("--ready-after", type=float, default=0.0)
parser.add_argument("--state", default="starting")
parser.add_argument("--first-line", default=None)
parser.add_argument("--exit-code", type=int, default=None)
args = parser.parse_args()
ready = threading.Event()
polls = []

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/readyz"):
            polls.append(self.path)
            wait = float(self.path.partition("wait=")[2] or 0)
            if args.state == "starting":
                ready.wait(wait)
            ok = ready.is_set()
            body = b"ready\\n" if ok else f"not ready: {args.state}\\n".encode()
            self.send_response(200 if ok else 503)
        else:
            body = str(len(polls)).encode()
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
httpd = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
port = httpd.server_address[1]
print(args.first_line or f"SenseStream listening on ws://127.0.0.1:{port}/ws", flush=True)
if args.exit_code is not None:
    sys.exit(args.exit_code)
threading.Thread(target=httpd.serve_forever, daemon=True).start()
for i in range(20000):
    print(f"noise {i:05d} " + "x" * 90, file=sys.stderr)
sys.stderr.flush()
time.sleep(args.ready_after)
if args.state == "starting":  # a draining server never becomes ready
    ready.set()
threading.Event().wait()
"""


@pytest.fixture
def fake_python(tmp_path: Path) -> str:
    """An 'interpreter' that runs the stand-in whatever module it is asked for."""
    path = tmp_path / "python"
    path.write_text(f"#!{sys.executable}\n{FAKE_SERVER}")
    path.chmod(0o755)
    return str(path)


def spec(python: str, *args: str, timeout_s: float = 30.0) -> ServerSpec:
    return ServerSpec(args, python=python, start_timeout_s=timeout_s, stop_timeout_s=10.0)


def test_ready_is_read_from_readyz_long_polls_and_the_output_is_drained(fake_python: str) -> None:
    started = time.monotonic()
    with spawn(spec(fake_python, "--ready-after", "1.5")) as server:
        waited = time.monotonic() - started
        assert server.get("/polls") == (200, "1")  # one long poll was held until ready
        assert server.url == f"ws://127.0.0.1:{server.port}/ws"
        assert server.http_url == f"http://127.0.0.1:{server.port}"
    assert 1.4 < waited < 10
    assert server.proc.returncode == 0  # SIGTERM: a clean exit
    stderr = server.output.lines("stderr")
    assert len(stderr) == 20000 and stderr[-1].startswith("noise 19999")
    assert server.output.lines("stdout")[0].startswith("SenseStream listening on ws://")
    assert server.output.wait_for(r"noise 0+42 ", timeout_s=1.0) is not None


def test_a_server_that_exits_is_an_error_with_its_status_and_output(fake_python: str) -> None:
    with pytest.raises(SpawnError, match="exit status 3") as failure:
        spawn(spec(fake_python, "--exit-code", "3"))
    assert "listening on ws://" in str(failure.value)


def test_the_first_line_must_say_where_it_listens(fake_python: str) -> None:
    with pytest.raises(SpawnError, match="no `listening on` line first"):
        spawn(spec(fake_python, "--first-line", "hello"))


def test_a_server_that_cannot_become_ready_fails_at_once(fake_python: str) -> None:
    started = time.monotonic()
    with pytest.raises(SpawnError, match="503: not ready: draining"):
        spawn(spec(fake_python, "--state", "draining"))
    assert time.monotonic() - started < 10


def test_a_server_too_slow_to_be_ready_fails_at_the_deadline(fake_python: str) -> None:
    started = time.monotonic()
    with pytest.raises(SpawnError, match="not ready within 2 s"):
        spawn(spec(fake_python, "--ready-after", "60", timeout_s=2.0))
    assert time.monotonic() - started < 12


def test_addresses_are_reachable_ones() -> None:
    assert Address.parse("SenseStream listening on ws://0.0.0.0:8765/ws") == Address(
        "ws", "127.0.0.1", 8765
    )
    tls = Address.parse("SenseStream listening on wss://localhost:443/ws")
    assert tls is not None and tls.http_url == "https://localhost:443"
    v6 = Address.parse("SenseStream listening on ws://::1:9000/ws")
    assert v6 is not None and v6.ws_url == "ws://[::1]:9000/ws"
    assert Address.parse("SenseStream page: http://127.0.0.1:8765/") is None
