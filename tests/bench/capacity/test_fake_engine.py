"""The declared-cost fake engine: answers after its declared time, served as an engine
process is (an EngineReplica on a Unix socket that a RemoteEngine attaches to)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from engine.remote.gateway import RemoteEngine
from engine.remote.replica import EngineReplica
from engine.remote.unix import UnixTransport, serve_replica
from engine.types import (
    SAMPLE_RATE,
    DecodeOptions,
    InferenceRequest,
    InferenceResult,
    RequestKind,
)
from tools.bench.capacity.fake_engine import (
    FAKE_BACKEND,
    FAKE_LABEL,
    READY_LINE,
    DeclaredCost,
    DeclaredCostEngine,
    fake_report,
    fake_transcript,
)

REPO = Path(__file__).resolve().parents[3]
T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(30):
            return await main

    return asyncio.run(bounded())


def request(
    session: str, request_id: int, seconds: float, kind: RequestKind = RequestKind.FINAL
) -> InferenceRequest:
    audio = np.zeros(int(seconds * SAMPLE_RATE), np.float32)
    return InferenceRequest(session, 0, kind, audio, DecodeOptions(), 0.0, request_id=request_id)


def test_the_declared_cost_and_the_fixed_answer() -> None:
    cost = DeclaredCost(fixed_ms=50, ms_per_audio_s=100)
    assert cost.delay_s(2 * SAMPLE_RATE) == pytest.approx(0.25)
    assert cost.delay_s(0) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="negative"):
        DeclaredCost(fixed_ms=-1)
    answer = fake_transcript(SAMPLE_RATE, itn=False)
    assert (answer.text, answer.lang, answer.emotion, answer.event) == (
        "hello world",
        "en",
        "neutral",
        "speech",
    )
    assert not answer.itn
    # Timed words cover the audio in order, as the partial window expects of a decode.
    spans = [(t.start_ms, t.end_ms) for t in answer.tokens]
    assert spans == [(0, 500), (500, 1000)]
    report = fake_report(cost)
    assert report.backend == FAKE_BACKEND
    assert FAKE_LABEL in report.model and "50 ms + 100 ms per audio s" in report.model


def test_answers_arrive_after_their_cost_over_the_socket(tmp_path: Path) -> None:
    """A 2 s final at 100 ms + 100 ms/s takes 300 ms; a 0.5 s partial sent beside it
    150 ms, so it overtakes: nothing queues behind anything."""
    path = str(tmp_path / "e.sock")
    cost = DeclaredCost(fixed_ms=100, ms_per_audio_s=100)

    async def main() -> tuple[str, list[tuple[int, float, str]]]:
        replica = EngineReplica(DeclaredCostEngine(cost), "f1", fake_report(cost))
        async with await serve_replica(replica, path):
            engine = RemoteEngine(UnixTransport([path]), collect_wait_s=0.5)
            engine.start()
            report = await engine.attached()
            queue = engine.open_session("s")
            loop = asyncio.get_running_loop()
            sent = loop.time()
            engine.submit(request("s", 1, 2.0))
            engine.submit(request("s", 2, 0.5, RequestKind.PARTIAL))
            got = []
            for _ in range(2):
                result = await queue.get()
                text = result.transcript.text if result.transcript else ""
                got.append((result.ref.request_id, loop.time() - sent, text))
            await engine.close(timeout=1)
            return report.backend, got

    backend, got = run(main())
    assert backend == FAKE_BACKEND
    assert [rid for rid, _, _ in got] == [2, 1]
    assert [text for _, _, text in got] == ["hello world", "hello world"]
    partial, final = got[0][1], got[1][1]
    assert 0.15 <= partial < 0.6
    assert 0.3 <= final < 0.8


def test_a_cancel_drops_the_answers_due_and_close_waits_for_the_rest() -> None:
    async def main() -> tuple[int, list[int], int, bool]:
        engine = DeclaredCostEngine(DeclaredCost(fixed_ms=50))
        engine.start()
        results: asyncio.Queue[InferenceResult] = asyncio.Queue()
        engine.open_session("a", results)
        engine.open_session("b", results)
        engine.submit(request("a", 1, 1.0))
        engine.submit(request("a", 2, 1.0))
        engine.submit(request("b", 3, 1.0))
        dropped = engine.cancel("a")
        await engine.close(timeout=2)  # what is due (b's) arrives first
        delivered = [results.get_nowait().ref.request_id for _ in range(results.qsize())]
        return dropped, delivered, engine.snapshot().batches, engine.healthy

    dropped, delivered, answered, healthy = run(main())
    assert dropped == 2
    assert delivered == [3]
    assert answered == 1
    assert not healthy


def test_a_closed_engine_takes_no_request_and_the_snapshot_counts_audio() -> None:
    async def main() -> None:
        engine = DeclaredCostEngine(DeclaredCost())
        queue = engine.open_session("s")
        with pytest.raises(ValueError, match="already open"):
            engine.open_session("s")
        with pytest.raises(ValueError, match="not open"):
            engine.submit(request("t", 1, 1.0))
        engine.submit(request("s", 1, 1.5))
        engine.submit(request("s", 2, 0.5, RequestKind.PARTIAL))
        assert engine.snapshot().queued == 2
        await queue.get()
        await queue.get()
        snapshot = engine.snapshot()
        assert snapshot.queued == 0
        assert snapshot.audio_s_by_kind["final"] == 1.5
        assert snapshot.audio_s_by_kind["partial"] == 0.5
        assert snapshot.devices[0]["backend"] == FAKE_BACKEND
        await engine.close(timeout=1)
        with pytest.raises(RuntimeError, match="closed"):
            engine.submit(request("s", 3, 1.0))

    run(main())


def test_the_module_serves_like_an_engine_process(tmp_path: Path) -> None:
    """`python -m tools.bench.capacity.fake_engine`: the engine process's ready line, a
    gateway's answers after the declared time, and SIGTERM ends it cleanly."""
    path = str(tmp_path / "e.sock")
    command = [
        *(sys.executable, "-m", "tools.bench.capacity.fake_engine", "--socket", path),
        *("--fixed-ms", "80", "--cost-ms-per-audio-s", "40"),
    ]
    with subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == f"{READY_LINE}{path}\n"

            async def ask() -> tuple[str, float]:
                engine = RemoteEngine(UnixTransport([path]), collect_wait_s=0.5)
                engine.start()
                report = await engine.attached()
                queue = engine.open_session("s")
                loop = asyncio.get_running_loop()
                sent = loop.time()
                engine.submit(request("s", 1, 3.0))
                await queue.get()
                took = loop.time() - sent
                await engine.close(timeout=1)
                return report.model, took

            model, took = run(ask())
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
    assert code == 0
    assert model.startswith(FAKE_LABEL)
    assert 0.2 <= took < 0.8  # 80 ms + 3 s x 40 ms
    assert not Path(path).exists()
