"""RemoteEngine over in-process replicas: the answers, the counters, failover and discovery."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from engine.backends.registry import BackendOptions, create_backend
from engine.client import EngineSnapshot
from engine.decoding.recognizer import Recognizer
from engine.errors import ReplicaLostError
from engine.model.directory import load_model_dir
from engine.remote.gateway import RemoteEngine
from engine.remote.messages import Collected, Hello, Tick
from engine.remote.replica import EngineReplica
from engine.serving.async_engine import AsyncEngine
from engine.types import (
    SAMPLE_RATE,
    DecodeOptions,
    InferenceRequest,
    InferenceResult,
    RequestKind,
)
from tests.engine.remote_fakes import REPORT, FakeEngine, LoopbackTransport, fake_replica
from tests.engine.serving.test_async_engine import make_engine, session_audio
from tests.speech import Clip

FINAL, PARTIAL = RequestKind.FINAL, RequestKind.PARTIAL
SESSIONS = 6


@pytest.fixture(scope="module")
def recognizers(tiny_model_dir: Path) -> tuple[Recognizer, Recognizer]:
    """One per replica: each engine's thread has a model of its own, as on two hosts."""
    model_dir = load_model_dir(tiny_model_dir)
    return (
        Recognizer(model_dir, create_backend(model_dir, BackendOptions(precision="fp32"))),
        Recognizer(model_dir, create_backend(model_dir, BackendOptions(precision="fp32"))),
    )


def request(
    session: str, request_id: int, kind: RequestKind = FINAL, audio: np.ndarray | None = None
) -> InferenceRequest:
    audio = np.zeros(1600, np.float32) if audio is None else audio
    arrival = asyncio.get_running_loop().time()
    return InferenceRequest(
        session, request_id, kind, audio, DecodeOptions(), arrival, request_id=request_id
    )


def fake(transport: LoopbackTransport, replica: str) -> FakeEngine:
    return fake_of(transport.replica(replica))


def fake_of(replica: EngineReplica) -> FakeEngine:
    assert isinstance(replica.engine, FakeEngine)
    return replica.engine


def sample(engine: RemoteEngine, name: str, labels: dict[str, str] | None = None) -> float | None:
    value: float | None = engine.metrics.registry.get_sample_value(name, labels)
    return value


def final_text(result: InferenceResult) -> str:
    assert result.transcript is not None, result.error_message
    return result.transcript.text


def drain(channel: asyncio.Queue[InferenceResult]) -> list[InferenceResult]:
    return [channel.get_nowait() for _ in range(channel.qsize())]


# ---- the loopback transport itself -----------------------------------------------


def test_the_loopback_transport_pickles_what_it_carries_and_kills_waiting_calls() -> None:
    async def main() -> dict[str, object]:
        seen: dict[str, object] = {}
        transport = LoopbackTransport()
        discovering = asyncio.create_task(transport.discover(frozenset()))
        done, _ = await asyncio.wait({discovering}, timeout=0.1)  # none live: it waits
        seen["discover waited"] = not done
        a = fake_replica("a")
        transport.add(a)
        hellos = await asyncio.wait_for(discovering, 5)
        seen["hello copied"] = hellos == [a.hello()] and hellos[0] is not a.hello()
        seen["known"] = await asyncio.wait_for(transport.discover(frozenset({"a"})), 1)

        sent = request("s", 0)
        before = transport.bytes_sent
        await asyncio.wait_for(transport.tick("a", Tick("gw", (sent,))), 1)
        seen["tick bytes"] = transport.bytes_sent - before
        got = await asyncio.wait_for(transport.collect("a", "gw", 5), 5)
        seen["answer"] = [final_text(r) for r in got.results]

        waiting = asyncio.create_task(transport.collect("a", "gw", 30))
        killing = asyncio.create_task(transport.kill("a"))
        with pytest.raises(ReplicaLostError):
            await asyncio.wait_for(waiting, 5)
        await asyncio.wait_for(killing, 5)
        with pytest.raises(ReplicaLostError):
            await asyncio.wait_for(transport.tick("a", Tick("gw")), 1)
        with pytest.raises(ReplicaLostError):
            await asyncio.wait_for(transport.collect("a", "gw", 0), 1)
        seen["engine closed"] = fake_of(a).closed
        seen["live"] = transport.live
        seen["calls"] = dict(transport.calls)
        return seen

    seen = asyncio.run(main())
    assert seen["discover waited"] and seen["hello copied"]
    assert seen["known"] == []
    assert isinstance(seen["tick bytes"], int) and seen["tick bytes"] > 1600 * 4  # the audio
    assert seen["answer"] == ["2:gw:s:0"]
    assert seen["engine closed"] is True and seen["live"] == ()
    assert seen["calls"] == {"discover": 2, "tick": 2, "collect": 3}


# ---- real engines -----------------------------------------------------------------


async def in_process(recognizer: Recognizer, audios: list[np.ndarray]) -> list[InferenceResult]:
    engine = make_engine(recognizer)
    engine.start()
    try:
        channels = [engine.open_session(f"s{i}") for i in range(len(audios))]
        for i, audio in enumerate(audios):
            engine.submit(request(f"s{i}", 0, audio=audio))
        return [await asyncio.wait_for(channel.get(), 30) for channel in channels]
    finally:
        await asyncio.wait_for(engine.close(timeout=10), 20)


@pytest.fixture(scope="module")
def audios(speech_clips: list[Clip]) -> list[np.ndarray]:
    return [session_audio(speech_clips, i) for i in range(SESSIONS)]


class RemoteRun:
    """What one run of the sessions through two real replicas left behind."""

    results: list[InferenceResult]
    combined: EngineSnapshot
    replicas: dict[str, EngineSnapshot]
    finals_by_replica: dict[str, float | None]
    transport: LoopbackTransport


async def through_replicas(
    recognizers: tuple[Recognizer, ...], audios: list[np.ndarray]
) -> RemoteRun:
    run = RemoteRun()
    engines: list[AsyncEngine] = []
    for recognizer in recognizers:
        engine = make_engine(recognizer)
        engine.start()
        engines.append(engine)
    transport = LoopbackTransport(EngineReplica(e, f"r{i}", REPORT) for i, e in enumerate(engines))
    remote = RemoteEngine(transport, gateway_id="gw", collect_wait_s=0.5)
    remote.start()
    try:
        await asyncio.wait_for(remote.attached(), 5)
        channels = [remote.open_session(f"s{i}") for i in range(len(audios))]
        for i, audio in enumerate(audios):
            remote.submit(request(f"s{i}", 0, audio=audio))
        run.results = [await asyncio.wait_for(channel.get(), 30) for channel in channels]
        run.combined = remote.snapshot()
        run.replicas = {f"r{i}": e.snapshot() for i, e in enumerate(engines)}
        labels = {"kind": "final", "outcome": "ok"}
        run.finals_by_replica = {
            f"r{i}": e.metrics.registry.get_sample_value("engine_requests_total", labels)
            for i, e in enumerate(engines)
        }
    finally:
        await asyncio.wait_for(remote.close(timeout=5), 20)  # closes the replicas' engines too
    run.transport = transport
    return run


def test_finals_through_two_replicas_equal_the_in_process_engines(
    recognizers: tuple[Recognizer, Recognizer], audios: list[np.ndarray]
) -> None:
    expected = asyncio.run(in_process(recognizers[0], audios))
    run = asyncio.run(through_replicas(recognizers, audios))

    for i, (got, want) in enumerate(zip(run.results, expected, strict=True)):
        assert got.ref == want.ref and got.ref.session_id == f"s{i}"
        assert got.error_code is None, got.error_message
        assert got.transcript == want.transcript  # tokens and tags too
    # The sessions were spread: each replica decoded half of them.
    assert run.finals_by_replica == {"r0": SESSIONS / 2, "r1": SESSIONS / 2}
    # Every request went over the wire, audio and all.
    transport = run.transport
    assert transport.bytes_sent >= sum(a.nbytes for a in audios)
    assert transport.bytes_received > 0
    assert transport.calls_to[("tick", "r0")] >= 1 and transport.calls_to[("tick", "r1")] >= 1


def test_the_snapshot_adds_up_both_replicas(
    recognizers: tuple[Recognizer, Recognizer], audios: list[np.ndarray]
) -> None:
    run = asyncio.run(through_replicas(recognizers, audios))
    combined, parts = run.combined, list(run.replicas.values())

    assert combined.replicas == ("r0", "r1")
    assert combined.batches == sum(p.batches for p in parts) >= 2
    assert combined.queued == 0 and combined.healthy
    assert combined.budget_bytes == 2 * (2 << 30)
    assert combined.max_batch == 8
    assert combined.audio_s_by_kind["final"] == pytest.approx(
        sum(p.audio_s_by_kind["final"] for p in parts), abs=0.051
    )
    assert combined.audio_s_by_kind["final"] == pytest.approx(
        sum(len(a) for a in audios) / 16000, abs=0.25
    )
    assert [(d["replica"], d["device"]) for d in combined.devices] == [("r0", "cpu"), ("r1", "cpu")]
    assert [d["batches"] for d in combined.devices] == [p.batches for p in parts]
    assert combined.to_stats()["replicas"] == ["r0", "r1"]


# ---- attaching --------------------------------------------------------------------


def test_healthy_only_once_a_replica_is_attached() -> None:
    async def main() -> dict[str, object]:
        seen: dict[str, object] = {}
        transport = LoopbackTransport()
        engine = RemoteEngine(transport, gateway_id="gw", collect_wait_s=0.2)
        seen["before start"] = engine.healthy
        engine.start()
        attaching = asyncio.create_task(engine.attached())
        done, _ = await asyncio.wait({attaching}, timeout=0.2)  # nothing to attach to yet
        seen["attached early"] = bool(done)
        seen["no replica"] = engine.healthy
        seen["no replica snapshot"] = engine.snapshot()
        channel = engine.open_session("s")
        engine.submit(request("s", 0))  # waits for a replica

        transport.add(fake_replica("a"))
        seen["report"] = await asyncio.wait_for(attaching, 5)
        seen["attached"] = engine.healthy
        seen["replicas"] = engine.replicas
        seen["answer"] = final_text(await asyncio.wait_for(channel.get(), 5))
        await asyncio.wait_for(engine.close(timeout=1), 5)
        seen["closed"] = engine.healthy
        seen["transport closed"] = transport.closed
        return seen

    seen = asyncio.run(main())
    assert seen["before start"] is False
    assert seen["attached early"] is False
    assert seen["no replica"] is False
    snapshot = seen["no replica snapshot"]
    assert isinstance(snapshot, EngineSnapshot)
    assert snapshot.healthy is False and snapshot.replicas == () and snapshot.batches == 0
    assert seen["report"] == REPORT
    assert seen["attached"] is True
    assert seen["replicas"] == ("a",)
    assert seen["answer"] == "2:gw:s:0"
    assert seen["closed"] is False
    assert seen["transport closed"] is True


def test_a_replica_added_later_is_discovered_and_takes_new_sessions() -> None:
    async def main() -> tuple[tuple[str, ...], list[str], list[str]]:
        transport = LoopbackTransport([fake_replica("a")])
        engine = RemoteEngine(transport, gateway_id="gw", discover_every_s=0.05)
        engine.start()
        await asyncio.wait_for(engine.attached(), 5)
        first = engine.open_session("s0")
        engine.submit(request("s0", 0))
        await asyncio.wait_for(first.get(), 5)

        transport.add(fake_replica("b"))
        await transport.watch.until(lambda: transport.calls_to[("collect", "b")] > 0)
        b = fake(transport, "b")
        channels = [engine.open_session(sid) for sid in ("s1", "s2", "s3")]
        for sid in ("s1", "s2", "s3"):
            engine.submit(request(sid, 0))
        answers = [final_text(await asyncio.wait_for(c.get(), 5)) for c in channels]
        replicas = engine.replicas
        await asyncio.wait_for(engine.close(timeout=1), 5)
        return replicas, answers, [r.session_id for r in b.received]

    replicas, answers, on_b = asyncio.run(main())
    assert replicas == ("a", "b")
    assert answers == ["2:gw:s1:0", "2:gw:s2:0", "2:gw:s3:0"]
    # a already served one session, so the newcomer takes the first new one and one more.
    assert on_b == ["2:gw:s1", "2:gw:s3"]


# ---- failover ---------------------------------------------------------------------


def test_owed_finals_of_a_killed_replica_arrive_exactly_once_through_another() -> None:
    sessions = ("s0", "s1", "s2")

    async def main() -> dict[str, object]:
        seen: dict[str, object] = {}
        hold = asyncio.Event()  # no replica answers until released
        transport = LoopbackTransport([fake_replica("a", hold)])
        engine = RemoteEngine(transport, gateway_id="gw", collect_wait_s=0.5, discover_every_s=0.05)
        engine.start()
        await asyncio.wait_for(engine.attached(), 5)
        channels = {sid: engine.open_session(sid) for sid in sessions}
        for sid in sessions:  # all pinned to a, the only replica
            engine.submit(request(sid, 0, PARTIAL))
            engine.submit(request(sid, 1))
            engine.submit(request(sid, 2, RequestKind.EARLY))
        a = fake(transport, "a")
        await a.watch.until(lambda: len(a.received) == 9)

        transport.add(fake_replica("b", hold))
        await transport.watch.until(lambda: transport.calls_to[("collect", "b")] > 0)
        b = fake(transport, "b")
        await asyncio.wait_for(transport.kill("a"), 5)
        await b.watch.until(lambda: len(b.received) == 6)
        seen["b received"] = sorted((r.session_id, r.request_id, r.kind) for r in b.received)
        seen["resent"] = sample(engine, "engine_remote_resent_requests_total")
        seen["lost"] = sample(engine, "engine_remote_replicas_lost_total")
        seen["replicas"] = engine.replicas

        hold.set()
        got = {
            sid: [await asyncio.wait_for(channels[sid].get(), 5) for _ in range(2)]
            for sid in sessions
        }
        await asyncio.wait_for(engine.close(timeout=5), 10)
        seen["extra"] = [r for c in channels.values() for r in drain(c)]
        seen["got"] = got
        seen["a answered"] = len(a.answered)
        seen["b answered"] = len(b.answered)
        return seen

    seen = asyncio.run(main())
    assert seen["b received"] == sorted(
        (f"2:gw:{sid}", rid, kind)
        for sid in sessions
        for rid, kind in ((1, FINAL), (2, RequestKind.EARLY))
    )
    assert seen["resent"] == 6 and seen["lost"] == 1
    assert seen["replicas"] == ("b",)
    got = seen["got"]
    assert isinstance(got, dict)
    for sid in sessions:
        assert sorted(final_text(r) for r in got[sid]) == [f"2:gw:{sid}:1", f"2:gw:{sid}:2"]
        assert {r.ref.session_id for r in got[sid]} == {sid}
    assert seen["extra"] == []  # each exactly once
    assert seen["a answered"] == 0 and seen["b answered"] == 6


@pytest.mark.parametrize("added_first", [False, True], ids=["added-after", "added-before"])
def test_losing_a_replica_looks_for_others_at_once(added_first: bool) -> None:
    async def main() -> tuple[list[str], tuple[str, ...], float | None]:
        transport = LoopbackTransport([fake_replica("a", asyncio.Event())])  # never answers
        # Without a loss nothing is looked for again within any test's deadline.
        engine = RemoteEngine(transport, gateway_id="gw", discover_every_s=600)
        engine.start()
        await asyncio.wait_for(engine.attached(), 5)
        channels = [engine.open_session(sid) for sid in ("s0", "s1")]
        for i, sid in enumerate(("s0", "s1")):
            engine.submit(request(sid, i))
        a = fake(transport, "a")
        await a.watch.until(lambda: len(a.received) == 2)
        if added_first:
            transport.add(fake_replica("c"))
        await asyncio.wait_for(transport.kill("a"), 5)
        if not added_first:
            transport.add(fake_replica("c"))
        answers = [final_text(await asyncio.wait_for(c.get(), 5)) for c in channels]
        replicas = engine.replicas
        resent = sample(engine, "engine_remote_resent_requests_total")
        await asyncio.wait_for(engine.close(timeout=1), 5)
        return answers, replicas, resent

    answers, replicas, resent = asyncio.run(main())
    assert answers == ["2:gw:s0:0", "2:gw:s1:1"]
    assert replicas == ("c",)
    assert resent == 2


# ---- cancel and close -------------------------------------------------------------


def test_cancel_forgets_what_a_session_is_owed_and_tells_its_replica() -> None:
    async def main() -> tuple[list[str], str, list[InferenceResult], float]:
        hold = asyncio.Event()
        transport = LoopbackTransport([fake_replica("a", hold)])
        engine = RemoteEngine(transport, gateway_id="gw", collect_wait_s=0.2)
        engine.start()
        await asyncio.wait_for(engine.attached(), 5)
        gone, kept = engine.open_session("gone"), engine.open_session("kept")
        engine.submit(request("gone", 0))
        engine.submit(request("kept", 0))
        a = fake(transport, "a")
        await a.watch.until(lambda: len(a.received) == 2)
        engine.cancel("gone")
        await a.watch.until(lambda: bool(a.cancelled))
        hold.set()
        answer = final_text(await asyncio.wait_for(kept.get(), 5))
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.wait_for(engine.close(timeout=5), 10)  # nothing owed: no waiting
        return list(a.cancelled), answer, drain(gone), loop.time() - start

    cancelled, answer, for_gone, closing_s = asyncio.run(main())
    assert cancelled == ["2:gw:gone"]
    assert answer == "2:gw:kept:0"
    assert for_gone == []
    assert closing_s < 2


def test_close_waits_for_every_owed_answer() -> None:
    async def main() -> tuple[bool, list[InferenceResult], bool]:
        hold = asyncio.Event()
        transport = LoopbackTransport([fake_replica("a", hold)])
        engine = RemoteEngine(transport, gateway_id="gw", collect_wait_s=0.2)
        engine.start()
        await asyncio.wait_for(engine.attached(), 5)
        channel = engine.open_session("s")
        for rid, kind in enumerate((FINAL, PARTIAL, FINAL, RequestKind.BACKGROUND)):
            engine.submit(request("s", rid, kind))
        a = fake(transport, "a")
        await a.watch.until(lambda: len(a.received) == 4)
        closing = asyncio.create_task(engine.close(timeout=30))
        done, _ = await asyncio.wait({closing}, timeout=0.3)  # answers are still owed
        waited = not done and not transport.closed
        hold.set()
        await asyncio.wait_for(closing, 5)
        return waited, drain(channel), transport.closed

    waited, results, closed = asyncio.run(main())
    assert waited
    owed = [r for r in results if r.ref.kind is not PARTIAL]
    assert sorted(r.ref.request_id for r in owed) == [0, 2, 3]
    assert closed


def test_close_gives_up_on_owed_answers_after_its_timeout() -> None:
    async def main() -> tuple[float, list[InferenceResult], bool, bool]:
        transport = LoopbackTransport([fake_replica("a", asyncio.Event())])  # never answers
        engine = RemoteEngine(transport, gateway_id="gw", collect_wait_s=0.2)
        engine.start()
        await asyncio.wait_for(engine.attached(), 5)
        channel = engine.open_session("s")
        engine.submit(request("s", 0))
        a = fake(transport, "a")
        await a.watch.until(lambda: len(a.received) == 1)
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.wait_for(engine.close(timeout=0.3), 5)
        return loop.time() - start, drain(channel), transport.closed, a.closed

    took, results, transport_closed, engine_closed = asyncio.run(main())
    assert 0.25 <= took < 3
    assert results == []
    assert transport_closed and engine_closed


# ---- failures that must not go unnoticed ------------------------------------------


class Moved:
    """What a gateway did when its replica a failed while session s was pinned to it."""

    answers: list[str]
    replicas: tuple[str, ...]
    lost: float | None
    logged: list[str]


def gateway(transport: LoopbackTransport) -> RemoteEngine:
    """Collects often; without a loss, looks for no replica again within any test's deadline."""
    return RemoteEngine(transport, gateway_id="gw", collect_wait_s=0.05, discover_every_s=600)


async def fail_a_while_s_waits(
    call: str,
    fault: str,
    caplog: pytest.LogCaptureFixture,
    make: Callable[[LoopbackTransport], RemoteEngine] = gateway,
) -> Moved:
    """Pin s to a (which never answers), make a's `call` fail (`fault`: "error" or "stall")."""
    # b must then answer s's finals: the one a holds, and on a tick the one it carried.
    moved = Moved()
    transport = LoopbackTransport([fake_replica("a", asyncio.Event()), fake_replica("b")])
    engine = make(transport)
    engine.start()
    await asyncio.wait_for(engine.attached(2), 5)
    channel = engine.open_session("s")
    engine.submit(request("s", 0))  # a, the first of two replicas with no session
    a, b = fake(transport, "a"), fake(transport, "b")
    await a.watch.until(lambda: len(a.received) == 1)
    if fault == "error":
        transport.fail(call, "a", RuntimeError("boom"))
    else:
        transport.stall(call, "a")
    finals = 1
    if call == "tick":  # a tick is made only when there is something to send
        engine.submit(request("s", 1))
        finals = 2
    await b.watch.until(lambda: len(b.received) == finals)
    got = [await asyncio.wait_for(channel.get(), 5) for _ in range(finals)]
    moved.answers = sorted(final_text(r) for r in got)
    moved.replicas = engine.replicas
    moved.lost = sample(engine, "engine_remote_replicas_lost_total")
    await asyncio.wait_for(engine.close(timeout=1), 5)
    moved.logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    return moved


def answered_by_b(call: str) -> list[str]:
    """s's finals, all answered by b (a tick is failed with s's second final in it)."""
    return ["2:gw:s:0", "2:gw:s:1"] if call == "tick" else ["2:gw:s:0"]


@pytest.mark.parametrize("call", ["tick", "collect"])
def test_any_error_in_a_link_task_loses_the_replica_and_moves_its_sessions(
    call: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="sensestream.engine"):
        moved = asyncio.run(fail_a_while_s_waits(call, "error", caplog))
    assert moved.answers == answered_by_b(call)
    assert moved.lost == 1
    # a itself still answers discovery, so it may be attached again as a new link.
    assert "b" in moved.replicas
    failed = [m for m in moved.logged if "replica a failed" in m]
    assert len(failed) == 1 and "RuntimeError: boom" in failed[0], moved.logged


@pytest.mark.parametrize("call", ["tick", "collect"])
def test_a_call_unanswered_past_its_deadline_loses_the_replica(
    call: str, caplog: pytest.LogCaptureFixture
) -> None:
    def with_deadline(transport: LoopbackTransport) -> RemoteEngine:
        # Long enough that no answer of a live in-process replica comes late.
        return RemoteEngine(
            transport,
            gateway_id="gw",
            collect_wait_s=0.05,
            discover_every_s=600,
            call_deadline_s=0.5,
        )

    with caplog.at_level(logging.WARNING, logger="sensestream.engine"):
        moved = asyncio.run(fail_a_while_s_waits(call, "stall", caplog, with_deadline))
    assert moved.answers == answered_by_b(call)
    assert moved.lost == 1
    assert moved.replicas == ("b",)  # a hung replica does not answer discovery either
    within = 0.5 if call == "tick" else 0.55  # a collect also has the wait it asks for
    assert any(f"no answer to a {call} call within {within:g} s" in m for m in moved.logged)


def test_discovery_outlives_an_error_and_logs_it(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> bool:
        transport = LoopbackTransport([fake_replica("a")])
        transport.fail("discover", "", RuntimeError("no controller"))
        engine = RemoteEngine(transport, gateway_id="gw", discover_every_s=0.05)
        engine.start()
        await asyncio.wait_for(engine.attached(), 5)
        healthy = engine.healthy
        await asyncio.wait_for(engine.close(timeout=1), 5)
        return healthy

    with caplog.at_level(logging.WARNING, logger="sensestream.engine"):
        assert asyncio.run(main()) is True
    assert any("RuntimeError" in r.getMessage() for r in caplog.records)


def test_with_no_replica_finals_past_the_bound_fail_and_the_rest_wait() -> None:
    async def main() -> dict[str, object]:
        seen: dict[str, object] = {}
        transport = LoopbackTransport()
        bound = 4000  # samples: two of the 1600-sample requests fit
        engine = RemoteEngine(transport, gateway_id="gw", homeless_audio_s=bound / SAMPLE_RATE)
        engine.start()
        channel = engine.open_session("s")
        engine.submit(request("s", 0))
        engine.submit(request("s", 1, PARTIAL))
        engine.submit(request("s", 2))  # the partial makes room
        engine.submit(request("s", 3))  # no room left: fails at once
        seen["failed"] = drain(channel)
        seen["healthy"] = engine.healthy  # the gateway refuses new sessions meanwhile
        seen["dropped"] = engine.snapshot().partials_dropped
        seen["counted"] = sample(engine, "engine_remote_failed_requests_total", {"kind": "final"})

        transport.add(fake_replica("a"))
        seen["answers"] = [final_text(await asyncio.wait_for(channel.get(), 5)) for _ in "01"]
        await asyncio.wait_for(engine.close(timeout=1), 5)
        seen["extra"] = drain(channel)
        return seen

    seen = asyncio.run(main())
    failed = seen["failed"]
    assert isinstance(failed, list) and len(failed) == 1
    assert failed[0].ref.request_id == 3 and failed[0].error_code == "no_replica"
    assert seen["healthy"] is False
    assert seen["dropped"] == 1 and seen["counted"] == 1
    assert seen["answers"] == ["2:gw:s:0", "2:gw:s:2"]
    assert seen["extra"] == []


def test_close_does_not_wait_for_a_final_that_failed_for_want_of_room() -> None:
    async def main() -> list[InferenceResult]:
        engine = RemoteEngine(LoopbackTransport(), gateway_id="gw", homeless_audio_s=0.0)
        engine.start()
        channel = engine.open_session("s")
        engine.submit(request("s", 0))
        await asyncio.wait_for(engine.close(), 5)  # no timeout: it waits for what is owed
        return drain(channel)

    (failed,) = asyncio.run(main())
    assert failed.error_code == "no_replica"


class NoReplicas:
    """A transport that never finds a replica, and answers discovery at once."""

    async def discover(self, known: frozenset[str]) -> list[Hello]:
        return []

    async def tick(self, replica: str, tick: Tick) -> None:
        raise AssertionError("no replica to tick")

    async def collect(self, replica: str, gateway: str, wait_s: float) -> Collected:
        raise AssertionError("no replica to collect from")

    async def close(self) -> None:
        pass


def test_discovery_stops_when_cancelled_as_a_loss_wakes_it() -> None:
    """A replica lost (which wakes discovery) in the same turn as `close` cancels it: on
    Python 3.11 `asyncio.wait_for` took the wake-up and swallowed the cancellation, so a
    worker whose engine died with it never finished stopping."""

    async def main() -> bool:
        engine = RemoteEngine(NoReplicas(), gateway_id="gw", discover_every_s=30.0)
        engine.start()
        for _ in range(3):
            await asyncio.sleep(0)  # discovery is waiting for its next turn
        task = engine._task
        assert task is not None
        engine._discover_now.set()  # as `_lose` does
        task.cancel()  # as `close` does
        done, _ = await asyncio.wait([task], timeout=2.0)
        return bool(done) and task.cancelled()

    assert asyncio.run(main()) is True
