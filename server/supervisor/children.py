"""Child processes the supervisor keeps running: started, watched, restarted, stopped.

A child that exits while the host is not stopping is restarted after a short backoff that
grows while it keeps dying young. Exit status 2 is a child's "cannot start" (a bad option,
a model that will not load): restarting cannot help, so the whole host stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass

log = logging.getLogger("sensestream.supervisor")

#: A child's "cannot start" exit status (the server's own for a bad config).
CANNOT_START = 2
#: A child that lived this long before dying is restarted at once.
HEALTHY_S = 30.0
#: The longest pause before a restart of a child that keeps dying young.
MAX_BACKOFF_S = 5.0


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """How to start one child: its name in logs, command, inherited descriptors."""

    name: str
    argv: tuple[str, ...]
    role: str  # engine or worker
    pass_fds: tuple[int, ...] = ()
    first_argv: tuple[str, ...] | None = None  # the first start's command, when it differs
    env: Mapping[str, str] | None = None  # its whole environment; None: the supervisor's


class Child:
    """One child process, restarted whenever it dies before the host stops."""

    def __init__(self, spec: ChildSpec, on_fatal: Callable[[str], None]) -> None:
        self.spec = spec
        self._on_fatal = on_fatal
        self.proc: asyncio.subprocess.Process | None = None
        self.restarts = 0
        self._stopping = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def start(self) -> None:
        first = self.proc is None and self.spec.first_argv is not None
        argv = self.spec.first_argv if first and self.spec.first_argv else self.spec.argv
        # A session of its own: a terminal's Ctrl-C reaches the supervisor alone, which
        # stops workers before the engines they need for their owed finals. The child's
        # stdin is a pipe held here: it reads EOF when the supervisor is gone, however.
        self.proc = await asyncio.create_subprocess_exec(
            *argv,
            pass_fds=self.spec.pass_fds,
            env=self.spec.env,
            stdin=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        log.info("%s started (pid %d)", self.spec.name, self.proc.pid)

    async def keep(self) -> None:
        """Restart the child whenever it exits, until `stop` or a fatal exit."""
        loop = asyncio.get_running_loop()
        backoff = 0.1
        while self.proc is not None:
            started = loop.time()
            status = await self.proc.wait()
            if self._stopping:
                return
            if status == CANNOT_START:
                self._on_fatal(f"{self.spec.name} cannot start (exit status {status})")
                return
            log.warning("%s (pid %d) exited with status %s", self.spec.name, self.proc.pid, status)
            backoff = 0.1 if loop.time() - started > HEALTHY_S else min(backoff * 2, MAX_BACKOFF_S)
            await asyncio.sleep(backoff)  # a pause before the restart, not a poll
            if self._stopping:
                return
            self.restarts += 1
            await self.start()

    async def stop(self, timeout_s: float) -> int | None:
        """SIGTERM, then SIGKILL after `timeout_s`; the exit status."""
        self._stopping = True
        proc = self.proc
        if proc is None:
            return None
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(timeout_s):
                return await proc.wait()
        except TimeoutError:
            log.warning("%s did not stop within %.0f s: killed", self.spec.name, timeout_s)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            return await proc.wait()
