"""Children restarted, given up, or stopping the host: real subprocesses (a fake child that
counts its starts and reports each one), with the pauses shrunk by the restart policy."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from server.supervisor.children import (
    Child,
    ChildSpec,
    Keeper,
    Lost,
    Restart,
    RestartPolicy,
    Restarts,
)

FAKE = Path(__file__).with_name("fake_child.py")
#: Restarts at once, given up after 3 failed restarts in a row.
FAST = RestartPolicy(first_pause_s=0.001, max_pause_s=0.01, max_failures=3)
DEADLINE_S = 20.0


class Fake:
    """One fake child: its spec, and the start numbers it reports."""

    def __init__(self, folder: Path, name: str, plan: str) -> None:
        self.socket = str(folder / f"{name}.sock")
        count = str(folder / f"{name}.count")
        argv = (sys.executable, str(FAKE), self.socket, count, plan)
        self.spec = ChildSpec(f"engine {name}", argv, "engine")
        self.starts: asyncio.Queue[int] = asyncio.Queue()
        self._server: asyncio.Server | None = None

    async def listen(self) -> None:
        self._server = await asyncio.start_unix_server(self._reported, path=self.socket)

    async def _reported(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.starts.put_nowait(int(await reader.readline()))
        writer.close()

    async def next_start(self) -> int:
        return await asyncio.wait_for(self.starts.get(), DEADLINE_S)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()


@dataclass
class Host:
    """A keeper of fake children, with what it told the host to do."""

    keeper: Keeper
    children: list[Child]
    tasks: list[asyncio.Task[None]]
    fatal: list[str] = field(default_factory=list)


@contextlib.asynccontextmanager
async def hosting(*fakes: Fake) -> AsyncIterator[Host]:
    fatal: list[str] = []
    keeper = Keeper(fatal.append)
    host = Host(keeper, [Child(fake.spec, FAST) for fake in fakes], [], fatal)
    try:
        for fake, child in zip(fakes, host.children, strict=True):
            await fake.listen()
            await child.start()
            host.tasks.append(keeper.watch(child))
        yield host
    finally:
        await asyncio.gather(*(child.stop(5.0) for child in host.children))
        await keeper.close()
        for fake in fakes:
            fake.close()


def kill(child: Child) -> None:
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)


def run(scenario: Any) -> Any:
    return asyncio.run(asyncio.wait_for(scenario, DEADLINE_S * 2))


def test_a_restarted_child_that_exits_2_is_restarted_and_the_host_stays_up(
    tmp_path: Path,
) -> None:
    # Killed, its second start exits 2 (out of GPU memory while warming up), its third runs.
    fake = Fake(tmp_path, "a", "run,2,run")

    async def scenario() -> tuple[list[int], list[str], int, bool]:
        async with hosting(fake) as host:
            starts = [await fake.next_start()]
            kill(host.children[0])
            starts += [await fake.next_start(), await fake.next_start()]
            child = host.children[0]
            running = child.proc is not None and child.proc.returncode is None
            return starts, list(host.fatal), child.restarts, running

    starts, fatal, restarts, running = run(scenario())
    assert starts == [1, 2, 3] and restarts == 2 and running
    assert fatal == []


def test_a_child_that_keeps_failing_its_restarts_is_given_up_and_alone_stops_the_host(
    tmp_path: Path,
) -> None:
    fake = Fake(tmp_path, "a", "run,2")

    async def scenario() -> tuple[list[int], list[str], Child]:
        async with hosting(fake) as host:
            starts = [await fake.next_start()]
            kill(host.children[0])
            starts += [await fake.next_start() for _ in range(3)]
            await asyncio.wait_for(host.tasks[0], DEADLINE_S)  # it is no longer kept
            return starts, list(host.fatal), host.children[0]

    starts, fatal, child = run(scenario())
    assert starts == [1, 2, 3, 4] and child.restarts == 3  # 3 failed restarts, no fourth
    assert fatal == ["engine a failed 3 restarts in a row (last exit status 2)"]
    assert child.lost is not None and child.pid is None


def test_one_engine_of_several_given_up_leaves_the_host_serving_on_the_others(
    tmp_path: Path,
) -> None:
    broken, sound = Fake(tmp_path, "a", "run,2"), Fake(tmp_path, "b", "run")

    async def scenario() -> tuple[list[str], int, bool]:
        async with hosting(broken, sound) as host:
            await broken.next_start()
            await sound.next_start()
            kill(host.children[0])
            await asyncio.wait_for(host.tasks[0], DEADLINE_S)
            other = host.children[1]
            running = other.proc is not None and other.proc.returncode is None
            return list(host.fatal), host.keeper.lost("engine"), running and other.lost is None

    fatal, lost, other_running = run(scenario())
    assert fatal == [] and lost == 1 and other_running


def test_a_first_start_that_exits_2_stops_the_host_at_once(tmp_path: Path) -> None:
    # A bad option or a model that will not load: the same on every start.
    bad, sound = Fake(tmp_path, "a", "2"), Fake(tmp_path, "b", "run")

    async def scenario() -> tuple[list[str], int]:
        async with hosting(sound, bad) as host:
            await asyncio.wait_for(host.tasks[1], DEADLINE_S)
            return list(host.fatal), host.children[1].restarts

    fatal, restarts = run(scenario())
    assert fatal == ["engine a cannot start (exit status 2)"] and restarts == 0


# ---- the decision, without processes ------------------------------------------------------


def test_exit_status_2_is_cannot_start_only_on_a_first_start_that_died_young() -> None:
    policy = RestartPolicy(healthy_s=30.0, first_pause_s=0.1, max_failures=8)
    assert Restarts(policy).exited(2, 1.0) == Lost("cannot start (exit status 2)", True)
    assert Restarts(policy).exited(2, 45.0) == Restart(0.1)  # it ran: a crash
    restarts = Restarts(policy)
    assert restarts.exited(-9, 1.0) == Restart(0.1)  # killed young: no failed restart
    assert restarts.exited(2, 1.0) == Restart(0.2)  # a restart that failed


def test_failed_restarts_in_a_row_give_up_and_a_healthy_run_starts_the_count_over() -> None:
    restarts = Restarts(RestartPolicy(healthy_s=30.0, first_pause_s=0.1, max_failures=2))
    assert restarts.exited(-9, 100.0) == Restart(0.1)
    assert restarts.exited(2, 1.0) == Restart(0.2)
    assert restarts.exited(-9, 31.0) == Restart(0.1)  # lived: the count starts over
    assert restarts.exited(2, 1.0) == Restart(0.2)
    assert restarts.exited(1, 1.0) == Lost("failed 2 restarts in a row (last exit status 1)", False)


@pytest.mark.parametrize(
    ("failures", "pause_s"), [(0, 0.1), (1, 0.2), (3, 0.8), (6, 6.4), (7, 10.0), (30, 10.0)]
)
def test_the_pause_before_a_restart_doubles_up_to_its_cap(failures: int, pause_s: float) -> None:
    assert RestartPolicy().pause_s(failures) == pytest.approx(pause_s)
