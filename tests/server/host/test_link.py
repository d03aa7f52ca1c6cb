"""Workers' links and the supervisor's control over a real Unix socket: stream ids claimed
host-wide, followers relayed in order, a worker's death seen by the others."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from server.host.admission import Admission, Kind, Limit, Scope
from server.host.link import LOST, HostLink
from server.host.messages import Followed, Subscribe, Topic
from server.streams.hub import StreamHub, Subscription
from server.supervisor.control import Control
from streaming.errors import ProtocolError
from streaming.events import Ended, SessionEvent
from tests.server.test_streams import configured, final


class Worker:
    """A worker's state as its link reports it: a real hub, fixed stats."""

    def __init__(self, index: int, control: str) -> None:
        self.link = HostLink(index, control, self, follower_capacity=64)
        self.streams = StreamHub(max_pending=16, max_backlog=8, observer=self.link)
        self.refused: list[ProtocolError] = []

    def local_stats(self) -> dict[str, Any]:
        return {"sessions": self.link.worker + 1}

    def local_metrics(self) -> bytes:
        return b""


@contextlib.asynccontextmanager
async def host(tmp_path: Path, workers: int = 2) -> AsyncIterator[tuple[Control, list[Worker]]]:
    async def gathered(topic: Topic, answers: list[tuple[int, object]]) -> object:
        return answers

    control = Control(Admission({kind: Limit(2, 1) for kind in Kind}), gathered)
    path = str(tmp_path / "control")
    await control.start(path)
    members = [Worker(i, path) for i in range(workers)]
    for member in members:
        await member.link.connect()
    while len(control.links) < workers:  # each link's first notice names its worker
        await asyncio.sleep(0)
    try:
        yield control, members
    finally:
        for member in members:
            await member.link.close()
        await control.close()


def run(scenario: Any) -> Any:
    return asyncio.run(asyncio.wait_for(scenario, 20))


async def take(sub: Subscription, n: int) -> list[SessionEvent]:
    return [await sub.outbox.get() for _ in range(n)]


def test_a_stream_id_taken_on_another_worker_refuses_the_later_stream(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        async with host(tmp_path) as (_, (first, second)):
            first.streams.open(configured("call"), "s1", "v1", 0.0)
            await asyncio.sleep(0.05)  # the first claim reaches the supervisor first
            late = second.streams.open(configured("call"), "s2", "v1", 0.0)
            refused: list[str] = []
            done = asyncio.Event()

            def refuse(exc: ProtocolError) -> None:
                refused.append(exc.code)
                done.set()

            late.refuse = refuse
            await asyncio.wait_for(done.wait(), 5)
            listed = await second.link.streams(None)
            return refused, [s["session_id"] for s in listed]

    refused, listed = run(scenario())
    assert refused == ["stream_id_taken"]
    assert "s1" in listed


def test_a_follower_elsewhere_gets_the_streams_events_in_order(tmp_path: Path) -> None:
    async def scenario() -> list[SessionEvent]:
        async with host(tmp_path) as (_, (owner, other)):
            follows = asyncio.create_task(other.link.follow("call", 5.0))
            await asyncio.sleep(0.05)  # the follow waits for the stream to start
            stream = owner.streams.open(configured("call"), "s1", "v1", 0.0)
            sub = await follows
            assert isinstance(sub, Subscription)
            for i in range(5):
                owner.streams.publish(stream, final(i))
            owner.streams.publish(stream, Ended())
            return await take(sub, 7)

    events = run(scenario())
    assert events[0] == configured("call")
    assert events[1:6] == [final(i) for i in range(5)] and events[6] == Ended()


def test_the_own_workers_stream_is_followed_here_and_a_missing_one_is_missing(
    tmp_path: Path,
) -> None:
    async def scenario() -> tuple[object, object]:
        async with host(tmp_path) as (_, (owner, _other)):
            owner.streams.open(configured("call"), "s1", "v1", 0.0)
            await asyncio.sleep(0.05)
            here = await owner.link.follow("call", 0.0)
            missing = await owner.link.follow("nobody", 0.0)
            return here, missing

    here, missing = run(scenario())
    assert isinstance(here, Subscription) and here.stream is not None  # the local hub's
    assert missing is Followed.MISSING


def test_a_dead_workers_followers_learn_the_stream_is_lost_and_its_leases_return(
    tmp_path: Path,
) -> None:
    async def scenario() -> tuple[list[SessionEvent], object, object]:
        async with host(tmp_path) as (control, (owner, other)):
            lease = await owner.link.acquire(Kind.SESSION, "10.0.0.1")
            full = await other.link.acquire(Kind.SESSION, "10.0.0.1")
            owner.streams.open(configured("call"), "s1", "v1", 0.0)
            await asyncio.sleep(0.05)
            sub = await other.link.follow("call", 0.0)
            assert isinstance(sub, Subscription) and isinstance(lease, int)
            await owner.link.close()  # as a killed worker's socket closes
            events = await take(sub, 3)
            while control.admission.count(Kind.SESSION):
                await asyncio.sleep(0.01)
            return events, full, await other.link.acquire(Kind.SESSION, "10.0.0.1")

    events, full, after = run(scenario())
    assert full is Scope.PEER  # one session per address, counted across workers
    assert events[1:] == [LOST, Ended()]
    assert isinstance(after, int)  # the dead worker's lease came back


def test_a_follower_whose_hand_over_crosses_the_streams_end_still_gets_all_of_it(
    tmp_path: Path,
) -> None:
    """The supervisor saw the stream live and asked its worker to relay it, but it ended
    in between (two hops): the worker relays the whole of it rather than answer missing."""

    async def scenario() -> tuple[object, list[SessionEvent], object]:
        async with host(tmp_path) as (_, (owner, _other)):
            stream = owner.streams.open(configured("call"), "s1", "v1", 0.0)
            owner.streams.publish(stream, final(0))
            owner.streams.close(stream, LOST)
            where = await owner.link.answer(Subscribe("1.0", "call"))
            ended = owner.streams.subscribe_ended("call")
            assert ended is not None
            return where, await take(ended, 4), await owner.link.answer(Subscribe("1.1", "x"))

    where, events, missing = run(scenario())
    assert where is Followed.RELAYED
    assert events == [configured("call"), final(0), LOST, Ended()]
    assert missing is Followed.MISSING


def test_a_client_secrets_sessions_are_counted_across_workers(tmp_path: Path) -> None:
    async def scenario() -> list[bool]:
        async with host(tmp_path) as (_, (first, second)):
            return [
                await first.link.use_token("tok", 2, 100.0, 1.0),
                await second.link.use_token("tok", 2, 100.0, 1.0),
                await first.link.use_token("tok", 2, 100.0, 1.0),
                await second.link.use_token("other", 2, 100.0, 1.0),
            ]

    assert run(scenario()) == [True, True, False, True]
