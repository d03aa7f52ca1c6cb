"""EngineReplica: one engine serving many gateways, each with its own sessions and results."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from engine.backends.registry import BackendOptions, create_backend
from engine.decoding.recognizer import Recognizer
from engine.model.directory import load_model_dir
from engine.remote.messages import Collected, Hello, Tick
from engine.remote.replica import EngineReplica
from engine.types import DecodeOptions, InferenceRequest, RequestKind
from tests.engine.remote_fakes import REPORT, FakeEngine
from tests.engine.serving.test_async_engine import direct, make_engine
from tests.speech import Clip

FINAL, PARTIAL = RequestKind.FINAL, RequestKind.PARTIAL


@pytest.fixture(scope="module")
def recognizer(tiny_model_dir: Path) -> Recognizer:
    model_dir = load_model_dir(tiny_model_dir)
    return Recognizer(model_dir, create_backend(model_dir, BackendOptions(precision="fp32")))


def request(
    session: str, request_id: int, kind: RequestKind = FINAL, audio: np.ndarray | None = None
) -> InferenceRequest:
    audio = np.zeros(1600, np.float32) if audio is None else audio
    # The gateway's clock means nothing on the replica: arrival is replaced there.
    return InferenceRequest(session, 0, kind, audio, DecodeOptions(), -1e9, request_id=request_id)


def fake_replica(hold: asyncio.Event | None = None, lease_s: float = 60.0) -> EngineReplica:
    engine = FakeEngine("fake", hold)
    engine.start()
    return EngineReplica(engine, "r1", REPORT, lease_s=lease_s)


def fake(replica: EngineReplica) -> FakeEngine:
    assert isinstance(replica.engine, FakeEngine)
    return replica.engine


def texts(got: Collected) -> list[str]:
    return [r.transcript.text if r.transcript else "" for r in got.results]


def now() -> float:
    return asyncio.get_running_loop().time()


async def collect(replica: EngineReplica, gateway: str, wait_s: float = 0.0) -> Collected:
    return await asyncio.wait_for(replica.collect(gateway, wait_s), wait_s + 5)


async def collect_until(replica: EngineReplica, gateway: str, count: int) -> list[Collected]:
    """Collect calls until `count` results came back (within a deadline)."""
    calls: list[Collected] = []
    async with asyncio.timeout(60):
        while sum(len(c.results) for c in calls) < count:
            calls.append(await collect(replica, gateway, 1.0))
    return calls


def test_two_gateways_with_the_same_session_id_get_their_own_results(
    recognizer: Recognizer, speech_clips: list[Clip]
) -> None:
    audio_1, audio_2 = speech_clips[0].audio, speech_clips[1].audio

    async def main() -> tuple[list[Collected], list[Collected]]:
        engine = make_engine(recognizer)
        engine.start()
        replica = EngineReplica(engine, "r1", REPORT)
        try:
            replica.tick(Tick("g1", (request("s", 0, audio=audio_1),)), now())
            replica.tick(Tick("g2", (request("s", 0, audio=audio_2),)), now())
            return await collect_until(replica, "g1", 1), await collect_until(replica, "g2", 1)
        finally:
            await asyncio.wait_for(engine.close(timeout=10), 20)

    got_1, got_2 = asyncio.run(main())
    for calls, audio in ((got_1, audio_1), (got_2, audio_2)):
        (result,) = [r for c in calls for r in c.results]
        assert all(c.replica == "r1" for c in calls)
        assert result.ref.session_id == "s"  # the gateway's name for it
        assert result.ref.request_id == 0 and result.ref.num_samples == len(audio)
        assert result.transcript is not None
        assert result.transcript.text == direct(recognizer, audio, DecodeOptions())
    assert got_1[-1].snapshot.batches >= 1


def test_results_come_back_under_the_gateways_session_ids_and_no_one_elses() -> None:
    async def main() -> tuple[Collected, Collected, Collected]:
        replica = fake_replica()
        replica.tick(Tick("g1", (request("a", 0), request("b", 1, PARTIAL))), now())
        replica.tick(Tick("g2", (request("a", 7),)), now())
        engine = fake(replica)
        await engine.watch.until(lambda: len(engine.answered) == 3)
        return (
            await collect(replica, "g1", 0),
            await collect(replica, "g2", 0),
            await collect(replica, "g3", 0),
        )

    got_1, got_2, got_3 = asyncio.run(main())
    assert sorted((r.ref.session_id, r.ref.request_id) for r in got_1.results) == [
        ("a", 0),
        ("b", 1),
    ]
    assert [(r.ref.session_id, r.ref.request_id) for r in got_2.results] == [("a", 7)]
    assert got_3.results == ()
    # The engine answered each gateway's own request (its text names what it was asked).
    assert sorted(texts(got_1)) == ["2:g1:a:0", "2:g1:b:1"] and texts(got_2) == ["2:g2:a:7"]


def test_hello_names_the_replica_and_its_report() -> None:
    replica = EngineReplica(FakeEngine(), "r9", REPORT)
    assert replica.hello() == Hello("r9", REPORT)


def test_collect_waits_for_the_first_result_and_returns_when_it_comes() -> None:
    async def main() -> tuple[bool, Collected, Collected]:
        hold = asyncio.Event()
        replica = fake_replica(hold)
        replica.tick(Tick("g", (request("s", 0),)), now())
        waiting = asyncio.create_task(replica.collect("g", wait_s=30))
        done, _ = await asyncio.wait({waiting}, timeout=0.2)
        returned_early = bool(done)
        hold.set()
        first = await asyncio.wait_for(waiting, 5)  # long before wait_s
        # Results already there are all taken by one call, without waiting.
        replica.tick(Tick("g", (request("s", 1), request("s", 2, PARTIAL))), now())
        engine = fake(replica)
        await engine.watch.until(lambda: engine.pending == 0)
        rest = await asyncio.wait_for(replica.collect("g", wait_s=30), 5)
        return returned_early, first, rest

    returned_early, first, rest = asyncio.run(main())
    assert not returned_early
    assert texts(first) == ["1:g:s:0"]
    assert sorted(texts(rest)) == ["1:g:s:1", "1:g:s:2"]
    assert first.snapshot.batches == 1 and rest.snapshot.batches == 3


def test_collect_returns_empty_after_wait_s_when_nothing_comes() -> None:
    async def main() -> tuple[Collected, float, Collected]:
        replica = fake_replica(asyncio.Event())  # never answers
        replica.tick(Tick("g", (request("s", 0),)), now())
        start = now()
        got = await asyncio.wait_for(replica.collect("g", wait_s=0.3), 5)
        waited = now() - start
        at_once = await asyncio.wait_for(replica.collect("g", wait_s=0), 0.5)
        return got, waited, at_once

    got, waited, at_once = asyncio.run(main())
    assert got.results == () and got.replica == "r1"
    assert got.snapshot.queued == 1  # the engine's counters come with it
    assert 0.25 <= waited < 3
    assert at_once.results == ()


def test_a_cancel_in_a_tick_drops_that_sessions_requests() -> None:
    async def main() -> tuple[Collected, Collected, list[str]]:
        hold = asyncio.Event()
        replica = fake_replica(hold)
        first = (request("s1", 0), request("s1", 1, PARTIAL), request("s2", 0))
        replica.tick(Tick("g", first), now())
        replica.tick(Tick("other", (request("s1", 0),)), now())  # same id, other gateway
        replica.tick(Tick("g", (), ("s1",)), now())
        # Cancels come first: a tick that cancels s3 and carries a request of s3 means the
        # id was opened again (a gateway drops a cancelled session's unsent requests).
        replica.tick(Tick("g", (request("s3", 0),), ("s3",)), now())
        hold.set()
        engine = fake(replica)
        await engine.watch.until(lambda: engine.pending == 0)
        return (
            await collect(replica, "g", 0),
            await collect(replica, "other", 0),
            list(engine.cancelled),
        )

    got, other, cancelled = asyncio.run(main())
    assert sorted(texts(got)) == ["1:g:s2:0", "1:g:s3:0"]
    assert texts(other) == ["5:other:s1:0"]
    assert len(cancelled) == 1  # g's s1 (s3 was not open yet), nothing of the other's


def test_a_cancel_for_a_session_the_replica_never_saw_is_ignored() -> None:
    async def main() -> list[str]:
        replica = fake_replica()
        replica.tick(Tick("g", (), ("nobody",)), now())
        return fake(replica).cancelled

    assert asyncio.run(main()) == []


def test_a_gateway_silent_past_its_lease_loses_its_sessions_on_anyones_next_tick() -> None:
    async def main() -> tuple[list[int], tuple[str, ...], Collected, Collected]:
        hold = asyncio.Event()
        replica = fake_replica(hold, lease_s=10.0)
        engine = fake(replica)
        t0 = now()
        replica.tick(Tick("quiet", (request("s", 0), request("t", 0))), t0)
        replica.tick(Tick("busy", (request("s", 0),)), t0)
        pending = [engine.pending]
        replica.tick(Tick("busy", ()), t0 + 9.5)  # within the lease: nothing happens
        pending.append(engine.pending)
        replica.tick(Tick("busy", ()), t0 + 10.5)
        await engine.watch.until(lambda: engine.pending == 1)
        pending.append(engine.pending)
        gateways = replica.gateways
        hold.set()
        await engine.watch.until(lambda: engine.pending == 0)
        # The quiet gateway, back, starts afresh: its old answers are gone.
        quiet = await collect(replica, "quiet", 0)
        busy = await collect(replica, "busy", 0)
        return pending, gateways, quiet, busy

    pending, gateways, quiet, busy = asyncio.run(main())
    assert pending == [3, 3, 1]
    assert gateways == ("busy",)
    assert quiet.results == ()
    assert texts(busy) == ["4:busy:s:0"]


def test_a_lease_also_runs_out_on_a_collect_from_another_gateway() -> None:
    async def main() -> tuple[tuple[str, ...], int, Collected]:
        replica = fake_replica(asyncio.Event(), lease_s=5.0)
        engine = fake(replica)
        replica.tick(Tick("quiet", (request("s", 0),)), now() - 6.0)  # last heard 6 s ago
        await collect(replica, "busy", 0)
        await engine.watch.until(lambda: engine.pending == 0)
        gateways = replica.gateways
        # Back again: its session opens anew and is served.
        engine.hold = None
        replica.tick(Tick("quiet", (request("s", 1),)), now())
        await engine.watch.until(lambda: len(engine.answered) == 1)
        return gateways, len(engine.cancelled), await collect(replica, "quiet", 0)

    gateways, cancels, back = asyncio.run(main())
    assert gateways == ("busy",)
    assert cancels == 1
    assert texts(back) == ["5:quiet:s:1"]


def test_a_collect_that_keeps_a_gateway_waiting_renews_its_lease() -> None:
    async def main() -> tuple[tuple[str, ...], Collected]:
        replica = fake_replica(lease_s=5.0)
        t0 = now()
        replica.tick(Tick("g", (request("s", 0),)), t0 - 4.0)
        got = await collect(replica, "g", 1.0)  # heard from now
        replica.tick(Tick("other", ()), t0 + 3.0)  # 7 s after g's tick, 3 s after collect
        return replica.gateways, got

    gateways, got = asyncio.run(main())
    assert set(gateways) == {"g", "other"}
    assert texts(got) == ["1:g:s:0"]


def test_a_result_after_a_cancelled_collect_goes_to_the_next_collect() -> None:
    async def main() -> Collected:
        hold = asyncio.Event()
        replica = fake_replica(hold)
        # The gateway's call is cancelled (an RPC timeout, or the gateway stopping).
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(replica.collect("g", wait_s=30), 0.1)
        replica.tick(Tick("g", (request("s", 0),)), now())
        waiting = asyncio.create_task(replica.collect("g", wait_s=1.0))
        asyncio.get_running_loop().call_soon(hold.set)  # the answer comes while it waits
        return await asyncio.wait_for(waiting, 5)

    assert texts(asyncio.run(main())) == ["1:g:s:0"]
