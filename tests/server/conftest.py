"""A real server process on 127.0.0.1:0 with the tiny model and the real FSMN VAD."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


class ServerProcess:
    """`python -m server` in a subprocess; knows its port once it is ready."""

    def __init__(self, model: Path, *extra: str) -> None:
        self.args = [
            sys.executable,
            "-m",
            "server",
            "--model",
            str(model),
            "--port",
            "0",
            "--precision",
            "fp32",
            "--max-batch",
            "4",
            "--log-level",
            "info",
            *extra,
        ]
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        self.proc = subprocess.Popen(
            self.args,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        threading.Thread(target=self._pump, daemon=True).start()
        self.port = int(self.wait_for(r"listening on ws://[\d.]+:(\d+)/ws").group(1))
        self.wait_for(r"ready in")

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.append(line)
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout: float = 120.0) -> re.Match[str]:
        """Block until a line matching `pattern` appears (or fail with the log)."""
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(
                    f"no {pattern!r} in server output:\n{''.join(self.log)}"
                ) from None
            match = re.search(pattern, line)
            if match:
                return match

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def http(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.terminate()
            try:
                return self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tiny_model_dir)
    yield proc
    proc.stop()


def spawn_server(
    python: str, *extra: str, cwd: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], int]:
    """`python -m server` on a free port; returns at once with its port (the first line,
    printed when bound, before any model work) and leaves waiting to the caller."""
    proc = subprocess.Popen(
        [
            python,
            "-m",
            "server",
            "--port",
            "0",
            "--precision",
            "fp32",
            "--max-batch",
            "1",
            *extra,
        ],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on ws://" not in line:
        proc.kill()
        raise AssertionError(f"no listening line: {line!r}\n{proc.communicate()[1]}")
    return proc, int(line.rsplit(":", 1)[1].split("/")[0])


def wait_ready(port: int, deadline_s: float = 240.0) -> None:
    """Long polls of /readyz: each returns as soon as the server is ready (or after 8 s)."""
    give_up = time.monotonic() + deadline_s
    while time.monotonic() < give_up:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz?wait=8", timeout=20):
                return
        except urllib.error.HTTPError as exc:
            assert exc.code == 503, exc
    raise AssertionError(f"not ready within {deadline_s} s")
