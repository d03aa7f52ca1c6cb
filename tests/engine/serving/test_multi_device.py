"""AsyncEngine over several devices: fake devices with declared costs, the real frontend."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import generate_latest

from engine.backends.registry import BackendOptions, create_backend
from engine.decoding.recognizer import Recognizer
from engine.model.directory import load_model_dir
from engine.model.prompts import PROMPT_FRAMES
from engine.serving.async_engine import AsyncEngine
from engine.serving.budget import Architecture, CostModel, MemoryBudget
from engine.serving.scheduler import Scheduler, SchedulerConfig
from engine.types import DecodeOptions, InferenceRequest, InferenceResult, RequestKind


class TimedDevice:
    """A device that takes `overhead` seconds a batch and records which thread ran it.

    With `meet`, its first batch waits there for another device's first batch: it goes on
    only if both run at once (`met`), and gives up when the barrier times out.
    """

    def __init__(self, name: str, overhead: float, meet: threading.Barrier | None = None) -> None:
        self.name = name
        self.overhead = overhead
        self.meet = meet
        self.met: bool | None = None  # None: never asked to meet
        self.threads: set[str] = set()
        self.items = 0

    def run(
        self, feats: Sequence[np.ndarray], options: Sequence[DecodeOptions]
    ) -> list[np.ndarray]:
        self.threads.add(threading.current_thread().name)
        self.items += len(feats)
        if self.meet is not None and self.met is None:
            try:
                self.meet.wait()
                self.met = True
            except threading.BrokenBarrierError:
                self.met = False  # the other device ran no batch while this one waited
        time.sleep(self.overhead)
        return [np.zeros(f.shape[0] + PROMPT_FRAMES, np.int32) for f in feats]


def engine_over(tiny: Path, devices: list[TimedDevice], max_batch: int = 2) -> AsyncEngine:
    model_dir = load_model_dir(tiny)
    recognizers = [Recognizer(model_dir, d) for d in devices]
    budgets = [MemoryBudget(1 << 30) for _ in devices]
    scheduler = Scheduler(
        SchedulerConfig(max_batch=max_batch, max_wait_ms=5),
        budgets,
        CostModel(Architecture(hidden=64, heads=2, ffn=128)),
        recognizers[0].frontend.num_frames,
    )
    names = [f"cuda:{i}" for i in range(len(devices))]
    return AsyncEngine(recognizers, scheduler, names)


def now() -> float:
    return asyncio.get_running_loop().time()


async def decode_all(engine: AsyncEngine, count: int) -> list[InferenceResult]:
    """Submit `count` one-second finals from as many sessions and wait for every answer."""
    channels = [engine.open_session(f"s{i}") for i in range(count)]
    audio = (0.05 * np.random.default_rng(0).standard_normal(16000)).astype(np.float32)
    for i in range(count):
        request = InferenceRequest(f"s{i}", 0, RequestKind.FINAL, audio, DecodeOptions(), now())
        engine.submit(request)
    return [await asyncio.wait_for(c.get(), 30) for c in channels]


def test_two_devices_run_batches_at_the_same_time(tiny_model_dir: Path) -> None:
    # Each device's first batch waits for the other's: they pass only by running together.
    # (The timeout only bounds how long a serial engine takes to fail: well within
    # decode_all's 30 s, so that failure is the answer `met` records.)
    meet = threading.Barrier(2, timeout=10)
    devices = [TimedDevice("a", 0.0, meet), TimedDevice("b", 0.0, meet)]

    async def main() -> tuple[list[InferenceResult], AsyncEngine]:
        engine = engine_over(tiny_model_dir, devices, max_batch=2)
        engine.start()
        results = await decode_all(engine, 12)
        await engine.close(timeout=10)
        return results, engine

    results, engine = asyncio.run(main())
    assert [d.met for d in devices] == [True, True]
    assert all(r.ok for r in results)
    assert devices[0].items + devices[1].items == 12
    # One executor thread per device, never shared.
    assert len(devices[0].threads) == len(devices[1].threads) == 1
    assert devices[0].threads.isdisjoint(devices[1].threads)
    stats = engine.device_stats()
    assert [s["device"] for s in stats] == ["cuda:0", "cuda:1"]
    assert sum(s["batches"] for s in stats) == 6
    assert all(s["in_flight"] == 0 and s["memory_in_use_bytes"] == 0 for s in stats)


def test_the_faster_device_takes_more_of_the_work(tiny_model_dir: Path) -> None:
    devices = [TimedDevice("slow", 0.15), TimedDevice("fast", 0.015)]

    async def main() -> None:
        engine = engine_over(tiny_model_dir, devices, max_batch=1)
        engine.start()
        await decode_all(engine, 20)
        await engine.close(timeout=10)

    asyncio.run(main())
    assert devices[1].items > 2 * devices[0].items


def test_the_event_loop_keeps_running_while_devices_work(tiny_model_dir: Path) -> None:
    devices = [TimedDevice("a", 0.3), TimedDevice("b", 0.3)]

    async def main() -> int:
        engine = engine_over(tiny_model_dir, devices, max_batch=1)
        engine.start()
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        await decode_all(engine, 2)
        task.cancel()
        await engine.close(timeout=10)
        return ticks

    assert asyncio.run(main()) >= 10  # 0.3 s of batches; a blocked loop would tick ~once


def test_per_device_series_are_labelled(tiny_model_dir: Path) -> None:
    devices = [TimedDevice("a", 0.01), TimedDevice("b", 0.01)]

    async def main() -> AsyncEngine:
        engine = engine_over(tiny_model_dir, devices, max_batch=1)
        engine.start()
        await decode_all(engine, 4)
        await engine.close(timeout=10)
        return engine

    engine = asyncio.run(main())
    text = generate_latest(engine.metrics.registry).decode()
    for name in ("cuda:0", "cuda:1"):
        assert f'engine_device_memory_budget_bytes{{device="{name}"}} 1.073741824e+09' in text
        assert f'engine_device_batches_in_flight{{device="{name}"}} 0.0' in text
    assert "engine_memory_budget_bytes 2.147483648e+09" in text  # the total over devices
    batches = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("engine_device_batches_total{")
    ]
    assert sum(batches) == 4


def test_one_recognizer_per_budget_and_name(tiny_model_dir: Path) -> None:
    engine = engine_over(tiny_model_dir, [TimedDevice("a", 0.0), TimedDevice("b", 0.0)])
    with pytest.raises(ValueError, match="one recognizer"):
        AsyncEngine(engine.recognizers[:1], engine.scheduler, ["cuda:0", "cuda:1"])


def test_parallel_features_give_the_same_transcripts(tiny_model_dir: Path) -> None:
    model_dir = load_model_dir(tiny_model_dir)
    recognizer = Recognizer(model_dir, create_backend(model_dir, BackendOptions(precision="fp32")))
    rng = np.random.default_rng(5)
    audios = [(0.1 * rng.standard_normal(8000 * (i + 2))).astype(np.float32) for i in range(6)]

    async def run(threads: int) -> list[str]:
        scheduler = Scheduler(
            SchedulerConfig(max_batch=6, max_wait_ms=50),
            [MemoryBudget(1 << 30)],
            CostModel(Architecture(hidden=64, heads=2, ffn=128)),
            recognizer.frontend.num_frames,
        )
        engine = AsyncEngine([recognizer], scheduler, ["cpu"], feature_threads=threads)
        engine.start()
        channels = [engine.open_session(f"s{i}") for i in range(len(audios))]
        for i, audio in enumerate(audios):
            engine.submit(
                InferenceRequest(f"s{i}", 0, RequestKind.FINAL, audio, DecodeOptions(), now())
            )
        results = [await asyncio.wait_for(c.get(), 30) for c in channels]
        await engine.close(timeout=10)
        return [r.transcript.text if r.transcript else "" for r in results]

    assert asyncio.run(run(3)) == asyncio.run(run(1))
