"""Child processes the supervisor keeps running: started, watched, restarted, stopped.

A child that exits while the host is not stopping is restarted after a short pause that
grows while it keeps dying young. Exit status 2 is a child's "cannot start" (a bad
option, a model that will not load), but only on its first start: restarting cannot help
there, so the whole host stops. A restarted child that exits 2 (an engine that runs out
of GPU memory warming up while its killed predecessor's is still being freed) is restarted
like any other; one that fails `max_failures` restarts in a row is given up. Giving up
on a child stops the host only when it leaves none of its kind running: an engine of
several devices fails alone, and the host serves on the others.
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


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """When a child that died is started again, and when it is given up.

    The defaults restart a child that was killed once after 0.1 s; one that keeps dying
    young waits 0.2, 0.4, … up to 10 s, and is given up after 8 failed restarts in a row:
    some 23 s of pauses plus eight warm-ups, long enough for a killed engine's GPU memory
    to be freed or a neighbour's burst to pass, short enough to surface a broken child.
    """

    healthy_s: float = 30.0  # a run this long was no failed start: the count starts over
    first_pause_s: float = 0.1
    max_pause_s: float = 10.0
    max_failures: int = 8  # consecutive restarts that died young before giving up

    def pause_s(self, failures: int) -> float:
        return min(self.first_pause_s * 2.0**failures, self.max_pause_s)


@dataclass(frozen=True, slots=True)
class Restart:
    """Start the child again after `pause_s`."""

    pause_s: float


@dataclass(frozen=True, slots=True)
class Lost:
    """The child is not started again: why, and whether it never ran at all."""

    why: str
    cannot_start: bool


class Restarts:
    """What to do when a child exits (sans-I/O: given its status and how long it lived)."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self.failures = 0  # restarts in a row that died young
        self._first = True

    def exited(self, status: int, lived_s: float) -> Restart | Lost:
        first, self._first = self._first, False
        young = lived_s < self.policy.healthy_s
        if status == CANNOT_START and first and young:
            return Lost(f"cannot start (exit status {status})", cannot_start=True)
        if not young:
            self.failures = 0
        elif not first:  # the first start dying young is no failed restart
            self.failures += 1
        if self.failures >= self.policy.max_failures:
            why = f"failed {self.failures} restarts in a row (last exit status {status})"
            return Lost(why, cannot_start=False)
        return Restart(self.policy.pause_s(self.failures))


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

    def __init__(self, spec: ChildSpec, policy: RestartPolicy | None = None) -> None:
        self.spec = spec
        self.policy = policy or RestartPolicy()
        self.proc: asyncio.subprocess.Process | None = None
        self.restarts = 0
        self.lost: Lost | None = None  # set once it is not started again
        self._stopping = False

    @property
    def pid(self) -> int | None:
        """The running process's id (None once the child is given up)."""
        return self.proc.pid if self.proc is not None and self.lost is None else None

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

    async def keep(self) -> Lost | None:
        """Restart the child whenever it exits, until `stop` (None) or it is lost."""
        loop = asyncio.get_running_loop()
        restarts = Restarts(self.policy)
        while self.proc is not None:
            started = loop.time()
            status = await self.proc.wait()
            if self._stopping:
                return None
            log.warning("%s (pid %d) exited with status %s", self.spec.name, self.proc.pid, status)
            decision = restarts.exited(status, loop.time() - started)
            if isinstance(decision, Lost):
                self.lost = Lost(f"{self.spec.name} {decision.why}", decision.cannot_start)
                return self.lost
            await asyncio.sleep(decision.pause_s)  # a pause before the restart, not a poll
            if self._stopping:
                return None
            self.restarts += 1
            try:
                await self.start()
            except OSError as exc:  # no process (fork refused): the next wait sees the
                # old one's status at once, a restart that died young
                log.warning("%s could not be started again: %s", self.spec.name, exc)
        return None

    def retiring(self) -> None:
        """It is going to exit of its own accord: not restarted when it does."""
        self._stopping = True

    async def exited(self, timeout_s: float) -> bool:
        """Whether the process exits within `timeout_s`."""
        proc = self.proc
        if proc is None:
            return True
        try:
            async with asyncio.timeout(timeout_s):
                await proc.wait()
        except TimeoutError:
            return False
        return True

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


class Keeper:
    """Keeps a host's children running; `on_fatal` when losing one must stop the host."""

    def __init__(self, on_fatal: Callable[[str], None]) -> None:
        self.children: list[Child] = []
        self._on_fatal = on_fatal
        self._tasks: set[asyncio.Task[None]] = set()

    def watch(self, child: Child) -> asyncio.Task[None]:
        """Keep `child` (started) running; the task ends when it is stopped or lost."""
        if child not in self.children:
            self.children.append(child)
        task = asyncio.create_task(self._keep(child), name=f"keep-{child.spec.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def forget(self, child: Child) -> None:
        """A child replaced by another (a reload): no longer one of its role's."""
        if child in self.children:
            self.children.remove(child)

    def lost(self, role: str) -> int:
        """How many children of `role` were given up."""
        return sum(1 for c in self.children if c.spec.role == role and c.lost is not None)

    async def _keep(self, child: Child) -> None:
        lost = await child.keep()
        if lost is None:
            return
        role = child.spec.role
        kept = [c for c in self.children if c.spec.role == role and c.lost is None]
        if lost.cannot_start or not kept:
            self._on_fatal(lost.why)
            return
        log.error("%s: given up; the host goes on with %d %s(s)", lost.why, len(kept), role)

    async def close(self) -> None:
        """Stop watching (the children themselves are stopped by their owner)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
