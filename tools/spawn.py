"""Start `python -m server` on a free port and wait until /readyz says it is ready.

The server prints `SenseStream listening on ws://HOST:PORT/ws` as its first stdout line
once the port is bound, before it loads the model; readiness is then asked of /readyz with
long polls (`?wait=8`: the server holds the answer until it is ready, 8 s at most). The
log's wording is never matched.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from tools.http import get

LISTENING = re.compile(r"listening on (wss?)://(\S+):(\d+)/ws")
READY_WAIT_S = 8  # the longest /readyz long poll the server grants
TAIL_LINES = 40


class SpawnError(RuntimeError):
    """The server did not start, or did not become ready."""


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """How to run a server: its options and the interpreter, folder and environment."""

    args: tuple[str, ...] = ()  # `python -m server` options
    python: str = sys.executable
    cwd: Path | None = None
    env: Mapping[str, str] | None = None  # None: this process's environment
    start_timeout_s: float = 300.0
    stop_timeout_s: float = 60.0
    # What the interpreter runs: `python -m server`, or the command's `-m sensestream serve`.
    entry: tuple[str, ...] = ("-m", "server")

    @property
    def command(self) -> tuple[str, ...]:
        # --port 0 first, so that a --port among `args` still wins.
        return (self.python, *self.entry, "--port", "0", *self.args)


@dataclass(frozen=True, slots=True)
class Address:
    """Where a server listens, as a client reaches it."""

    scheme: str  # ws or wss
    host: str
    port: int

    @classmethod
    def parse(cls, line: str) -> Address | None:
        """The address in a `listening on ws://HOST:PORT/ws` line (None if it has none)."""
        match = LISTENING.search(line)
        if match is None:
            return None
        host = match.group(2).strip("[]")
        # A wildcard bind is reached on the loopback address.
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        return cls(match.group(1), host, int(match.group(3)))

    @property
    def netloc(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"{self.scheme}://{self.netloc}/ws"

    @property
    def http_url(self) -> str:
        return f"{'https' if self.scheme == 'wss' else 'http'}://{self.netloc}"


class Output:
    """A child's stdout and stderr lines, read by one thread each so the pipes never fill."""

    def __init__(self) -> None:
        self._lines: list[tuple[str, str]] = []
        self._changed = threading.Condition()
        self._threads: list[threading.Thread] = []

    def follow(self, name: str, stream: IO[str]) -> None:
        thread = threading.Thread(
            target=self._pump, args=(name, stream), name=f"server-{name}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def _pump(self, name: str, stream: IO[str]) -> None:
        try:
            for line in stream:
                with self._changed:
                    self._lines.append((name, line))
                    self._changed.notify_all()
        finally:
            with self._changed:
                self._lines.append((name, ""))  # "" marks the end of that stream
                self._changed.notify_all()

    def lines(self, name: str | None = None) -> list[str]:
        """Every line so far, of one stream or of both in arrival order."""
        with self._changed:
            return [line for n, line in self._lines if line and name in (None, n)]

    def text(self, name: str | None = None) -> str:
        return "".join(self.lines(name))

    def tail(self, count: int = TAIL_LINES) -> str:
        return "".join(self.lines()[-count:])

    def first_line(self, name: str, timeout_s: float) -> str | None:
        """The first line of one stream, waiting up to `timeout_s` (None: it never came)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                first = next((line for n, line in self._lines if n == name), None)
                left = deadline - time.monotonic()
                if first is not None or left <= 0:
                    return first or None
                self._changed.wait(left)

    def wait_for(self, pattern: str, timeout_s: float, count: int = 1) -> re.Match[str] | None:
        """The `count`th line, already printed or to come, that matches `pattern`."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        checked = seen = 0
        with self._changed:
            while True:
                for _, line in self._lines[checked:]:
                    if found := regex.search(line):
                        seen += 1
                        if seen == count:
                            return found
                checked = len(self._lines)
                ended = sum(1 for _, line in self._lines if not line) == len(self._threads)
                left = deadline - time.monotonic()
                if ended or left <= 0:
                    return None
                self._changed.wait(left)

    def join(self, timeout_s: float) -> None:
        for thread in self._threads:
            thread.join(timeout_s)


def start_followed(
    command: Sequence[str], *, cwd: Path | str | None = None, env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen[str], Output]:
    """Start a child with no stdin and both output pipes read into an `Output`."""
    proc = subprocess.Popen(
        list(command),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
    )
    if proc.stdout is None or proc.stderr is None:
        raise SpawnError("no pipes to the child")
    output = Output()
    output.follow("stdout", proc.stdout)
    output.follow("stderr", proc.stderr)
    return proc, output


def wait_ready(http_url: str, timeout_s: float, *, verify: bool = True) -> None:
    """Long-poll `/readyz?wait=8` until it answers 200; SpawnError on a deadline or a
    server that cannot become ready (draining, no answer)."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        wait = max(1, min(READY_WAIT_S, int(left)))
        try:
            status, body = get(f"{http_url}/readyz?wait={wait}", timeout_s=wait + 10, verify=verify)
        except TimeoutError:
            continue  # a host too busy to answer within the poll: ask again
        except OSError as exc:
            raise SpawnError(f"no answer from {http_url}/readyz: {exc}") from exc
        if status == 200:
            return
        # While starting the answer is held; any other 503 would come back at once.
        if status != 503 or "starting" not in body:
            raise SpawnError(f"{http_url}/readyz answered {status}: {body.strip()}")
    raise SpawnError(f"{http_url} not ready within {timeout_s:g} s")


class SpawnedServer:
    """A `python -m server` child: where it listens, its output, readiness and stop."""

    def __init__(self, spec: ServerSpec) -> None:
        """Start the child and return once it has printed where it listens."""
        self.spec = spec
        env = {**(os.environ if spec.env is None else spec.env), "PYTHONUNBUFFERED": "1"}
        # One process unless the options or the environment ask for workers (`auto`, the
        # server's default, would follow this host's cores).
        env.setdefault("SENSESTREAM_WORKERS", "1")
        self.proc, self.output = start_followed(spec.command, cwd=spec.cwd, env=env)
        first = self.output.first_line("stdout", spec.start_timeout_s)
        address = Address.parse(first or "")
        if address is None:
            self.stop()
            raise SpawnError(self._explain(f"no `listening on` line first (got {first!r})"))
        self.address = address

    @property
    def port(self) -> int:
        return self.address.port

    @property
    def url(self) -> str:
        return self.address.ws_url

    @property
    def http_url(self) -> str:
        return self.address.http_url

    def get(self, path: str, timeout_s: float = 10.0) -> tuple[int, str]:
        """(status, body) of a GET on this server (its own certificate is not checked)."""
        return get(self.http_url + path, timeout_s=timeout_s, verify=False)

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until /readyz answers 200; on failure stop the child and raise."""
        try:
            wait_ready(self.http_url, timeout_s or self.spec.start_timeout_s, verify=False)
        except SpawnError as exc:
            self.stop()
            raise SpawnError(self._explain(str(exc))) from exc

    def terminate(self) -> None:
        """SIGTERM: the server drains its sessions and exits."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it has not exited within the stop timeout."""
        self.terminate()
        try:
            code = self.proc.wait(timeout=self.spec.stop_timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.output.join(timeout_s=5.0)
        return code

    def _explain(self, problem: str) -> str:
        status = self.proc.poll()
        state = "running" if status is None else f"exit status {status}"
        command = " ".join(self.spec.command)
        return f"{problem}\n{command} ({state}); its last output:\n{self.output.tail()}"

    def __enter__(self) -> SpawnedServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def spawn(spec: ServerSpec) -> SpawnedServer:
    """Start a server and wait until it is ready (SpawnError, with its output, if not)."""
    server = SpawnedServer(spec)
    server.wait_ready()
    return server
