"""The Unix-socket transport against real replica servers in this process."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from engine.errors import ReplicaLostError
from engine.remote.gateway import RemoteEngine
from engine.remote.messages import Collected, Tick
from engine.remote.unix import UnixTransport, serve_replica
from engine.types import DecodeOptions, InferenceRequest, RequestKind
from tests.engine.remote_fakes import REPORT, fake_replica

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(20):
            return await main

    return asyncio.run(bounded())


def request(session: str, request_id: int) -> InferenceRequest:
    audio = np.full(1600, 0.25, np.float32)
    return InferenceRequest(
        session, 0, RequestKind.FINAL, audio, DecodeOptions(), -1e9, request_id=request_id
    )


def answers(got: Collected) -> list[tuple[str, int, str]]:
    return [
        (r.ref.session_id, r.ref.request_id, r.transcript.text if r.transcript else "")
        for r in got.results
    ]


def test_discovery_finds_each_engine_once_and_its_socket_is_private(tmp_path: Path) -> None:
    paths = [str(tmp_path / "a.sock"), str(tmp_path / "b.sock")]

    async def main() -> tuple[list[str], list[str], list[int]]:
        servers = [
            await serve_replica(fake_replica(rid), path)
            for rid, path in zip(("r1", "r2"), paths, strict=True)
        ]
        transport = UnixTransport([*paths, paths[0]])  # a socket named twice: one replica
        try:
            first = await transport.discover(frozenset())
            assert all(h.report == REPORT for h in first)
            again = await transport.discover(frozenset({"r1"}))
            modes = [stat.S_IMODE(os.stat(p).st_mode) for p in paths]
            return [h.replica for h in first], [h.replica for h in again], modes
        finally:
            await transport.close()
            for server in servers:
                await server.close()

    first, again, modes = run(main())
    assert sorted(first) == ["r1", "r2"]
    assert again == ["r2"]
    assert modes == [0o600, 0o600]
    assert not any(Path(p).exists() for p in paths)  # closing removes the socket file
    assert [p.name for p in tmp_path.iterdir()] == []  # and no private bind folder is left


def test_a_tick_then_collect_returns_the_results_in_order(tmp_path: Path) -> None:
    path = str(tmp_path / "e.sock")

    async def main() -> list[tuple[str, int, str]]:
        replica = fake_replica("r1")
        async with await serve_replica(replica, path):
            transport = UnixTransport([path])
            await transport.discover(frozenset())
            tick = Tick("g1", tuple(request("s", i) for i in range(5)))
            await transport.tick("r1", tick)
            got: list[tuple[str, int, str]] = []
            while len(got) < 5:
                got += answers(await transport.collect("r1", "g1", 2.0))
            await transport.close()
            return got

    got = run(main())
    assert [(sid, rid) for sid, rid, _ in got] == [("s", i) for i in range(5)]
    # The fake engine names the request as it saw it: the audio and ids arrived intact.
    assert [text.rsplit(":", 1)[1] for _, _, text in got] == ["0", "1", "2", "3", "4"]


def test_a_collect_waits_until_a_result_wakes_it(tmp_path: Path) -> None:
    path = str(tmp_path / "e.sock")

    async def main() -> tuple[bool, float, list[tuple[str, int, str]]]:
        hold = asyncio.Event()
        loop = asyncio.get_running_loop()
        async with await serve_replica(fake_replica("r1", hold), path):
            transport = UnixTransport([path])
            await transport.discover(frozenset())
            await transport.tick("r1", Tick("g1", (request("s", 7),)))
            collect = asyncio.ensure_future(transport.collect("r1", "g1", 10.0))
            await asyncio.sleep(0.3)
            waited = not collect.done()
            released = loop.time()
            hold.set()
            got = await collect
            await transport.close()
            return waited, loop.time() - released, answers(got)

    waited, took, got = run(main())
    assert waited
    assert took < 2.0  # woken by the result, not by the end of its 10 s wait
    assert [(sid, rid) for sid, rid, _ in got] == [("s", 7)]


def test_concurrent_calls_on_one_connection_each_get_their_own_answer(tmp_path: Path) -> None:
    path = str(tmp_path / "e.sock")

    async def main() -> tuple[bool, list[tuple[str, int, str]], list[tuple[str, int, str]]]:
        async with await serve_replica(fake_replica("r1"), path):
            transport = UnixTransport([path])
            await transport.discover(frozenset())
            # Two long polls waiting at once (two gateways' collectors), and ticks between.
            first = asyncio.ensure_future(transport.collect("r1", "g1", 10.0))
            second = asyncio.ensure_future(transport.collect("r1", "g2", 10.0))
            await asyncio.sleep(0.1)
            await transport.tick("r1", Tick("g2", (request("b", 2),)))
            got_second = await second
            pending = not first.done()
            await transport.tick("r1", Tick("g1", (request("a", 1),)))
            got_first = await first
            await transport.close()
            return pending, answers(got_first), answers(got_second)

    pending, got_first, got_second = run(main())
    assert pending  # g2's result did not answer g1's earlier call
    assert [(sid, rid) for sid, rid, _ in got_first] == [("a", 1)]
    assert [(sid, rid) for sid, rid, _ in got_second] == [("b", 2)]


def test_a_closed_engine_is_lost_and_one_back_on_the_path_is_found(tmp_path: Path) -> None:
    path = str(tmp_path / "e.sock")

    async def main() -> tuple[list[str], list[tuple[str, int, str]]]:
        transport = UnixTransport([path], start_wait_s=0.2)
        server = await serve_replica(fake_replica("r1"), path)
        await transport.discover(frozenset())
        waiting = asyncio.ensure_future(transport.collect("r1", "g1", 10.0))
        await asyncio.sleep(0.1)
        await server.close()
        with pytest.raises(ReplicaLostError, match="r1"):
            await waiting  # a long poll in flight learns of it at once
        with pytest.raises(ReplicaLostError, match="r1"):
            await transport.tick("r1", Tick("g1", (request("s", 0),)))
        assert await transport.discover(frozenset()) == []  # none answers (after 0.2 s)
        async with await serve_replica(fake_replica("r2"), path):
            found = [h.replica for h in await transport.discover(frozenset())]
            await transport.tick("r2", Tick("g1", (request("s", 1),)))
            got = answers(await transport.collect("r2", "g1", 5.0))
            with pytest.raises(ReplicaLostError, match="r1"):
                await transport.collect("r1", "g1", 0.0)
        await transport.close()
        return found, got

    found, got = run(main())
    assert found == ["r2"]
    assert [(sid, rid) for sid, rid, _ in got] == [("s", 1)]


def test_a_stale_socket_is_replaced_but_a_live_one_or_a_file_is_not(tmp_path: Path) -> None:
    stale = tmp_path / "stale.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(stale))  # bound and closed: the file a killed process leaves behind
    dead.close()
    plain = tmp_path / "plain.sock"
    plain.write_text("not a socket")

    async def main() -> None:
        async with await serve_replica(fake_replica("r1"), str(stale)):
            with pytest.raises(FileExistsError, match="already listens"):
                await serve_replica(fake_replica("r2"), str(stale))
            transport = UnixTransport([str(stale)])
            assert [h.replica for h in await transport.discover(frozenset())] == ["r1"]
            await transport.close()
        with pytest.raises(FileExistsError, match="not a socket"):
            await serve_replica(fake_replica("r3"), str(plain))

    run(main())
    assert plain.read_text() == "not a socket"


def test_a_remote_engine_over_the_socket_delivers_its_sessions_results(tmp_path: Path) -> None:
    path = str(tmp_path / "e.sock")

    async def main() -> list[int]:
        async with await serve_replica(fake_replica("r1"), path):
            engine = RemoteEngine(UnixTransport([path]), collect_wait_s=0.5)
            engine.start()
            await engine.attached()
            queue = engine.open_session("s")
            for i in range(3):
                engine.submit(request("s", i))
            got = [(await queue.get()).ref.request_id for _ in range(3)]
            await engine.close(timeout=1)
            return got

    assert run(main()) == [0, 1, 2]
