"""The workload every target runs, and how it is timed: lone finals one after another,
a burst of finals from many sessions, and a hop's tick and its bytes on the wire."""

from __future__ import annotations

import asyncio
import pickle
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine.backends.registry import BackendOptions
from engine.client import EngineClient
from engine.remote.messages import Tick
from engine.serving.async_engine import AsyncEngine
from engine.serving.builder import EngineConfig, build_engine_parts
from engine.types import SAMPLE_RATE, DecodeOptions, InferenceRequest, RequestKind
from tools.bench.common.stats import spread
from tools.speech import speak

PASSAGE = (
    "Call centres record many conversations at once. Each one must be decoded quickly and "
    "kept apart from the others. The final result arrives soon after the speaker stops, "
    "with the language, the emotion and any sound events that were heard."
)
LENGTHS_S = (2.0, 4.0, 6.0, 8.0)
HOP_AUDIO_S = (0.0, 1.0, 4.0, 15.0)


def utterances(count: int, cache: Path) -> list[np.ndarray]:
    """`count` cuts of espeak speech, 2-8 s long, cycling through the passage."""
    speech = speak(PASSAGE, cache_dir=cache)
    while len(speech) < SAMPLE_RATE * max(LENGTHS_S) * 2:
        speech = np.concatenate([speech, speech])
    out, at = [], 0
    for i in range(count):
        n = int(LENGTHS_S[i % len(LENGTHS_S)] * SAMPLE_RATE)
        if at + n > len(speech):
            at = 0
        out.append(speech[at : at + n])
        at += n
    return out


def request(session: str, number: int, audio: np.ndarray) -> InferenceRequest:
    """A final that arrives now: stamped as a session stamps it, so the in-process engine
    waits out the same batching window (`max_wait_ms`) a replica does."""
    now = asyncio.get_running_loop().time()
    return InferenceRequest(
        session, number, RequestKind.FINAL, audio, DecodeOptions(), now, request_id=number + 1
    )


async def serial(engine: EngineClient, audio: np.ndarray, count: int) -> dict[str, float]:
    """Lone finals one after another: each request's latency with nothing else queued."""
    results = engine.open_session("serial")
    times = []
    for i in range(count):
        started = time.perf_counter()
        engine.submit(request("serial", i, audio))
        await asyncio.wait_for(results.get(), 120)
        times.append(time.perf_counter() - started)
    engine.cancel("serial")
    return summary(times[1:])  # the first pays for warm caches and connections


async def burst(
    engine: EngineClient, clips: Sequence[np.ndarray], sessions: int
) -> dict[str, float]:
    """Every clip at once, spread over `sessions` sessions; until the last answer."""
    queues = [engine.open_session(f"b{s}") for s in range(sessions)]
    cpu, started = time.process_time(), time.perf_counter()
    for i, clip in enumerate(clips):
        engine.submit(request(f"b{i % sessions}", i, clip))
    for s, queue in enumerate(queues):
        for _ in range(len(clips[s::sessions])):
            await asyncio.wait_for(queue.get(), 600)
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu
    for s in range(sessions):
        engine.cancel(f"b{s}")
    audio_s = sum(len(c) for c in clips) / SAMPLE_RATE
    return {
        "utterances": len(clips),
        "sessions": sessions,
        "audio_s": round(audio_s, 1),
        "wall_s": round(wall, 3),
        "audio_s_per_s": round(audio_s / wall, 1),
        "gateway_cpu_ms_per_request": round(cpu / len(clips) * 1000, 3),
    }


def summary(seconds: Sequence[float]) -> dict[str, float]:
    ms = spread([s * 1000 for s in seconds])
    return {
        "n": ms.count,
        "p50_ms": round(ms.p50, 2),
        "p95_ms": round(ms.p95, 2),
        "mean_ms": round(ms.mean, 2),
    }


async def measure(engine: EngineClient, clips: Sequence[np.ndarray], args: Any) -> dict[str, Any]:
    lone = await serial(engine, clips[1], args.serial)  # a 4 s final
    return {"serial_4s_final": lone, "burst": await burst(engine, clips, args.sessions)}


def in_process(config: EngineConfig, clips: Sequence[np.ndarray], args: Any) -> dict[str, Any]:
    parts = build_engine_parts(config)

    async def run() -> dict[str, Any]:
        engine = AsyncEngine.from_parts(parts)
        engine.start()
        try:
            return await measure(engine, clips, args)
        finally:
            await engine.close(timeout=30)

    return {"target": "in-process", "replicas": 0, "threads": config.backend.threads} | (
        asyncio.run(run())
    )


def engine_config(args: Any, threads: int) -> EngineConfig:
    return EngineConfig(
        model=str(args.model),
        backend=BackendOptions(backend="onnx", precision=args.precision, threads=threads),
        max_batch=args.max_batch,
    )


def wire_bytes(message: object) -> int:
    return len(pickle.dumps(message, protocol=5))


def tick_of(audio_s: float, *, cancel: bool = True) -> Tick:
    """A tick with one request of `audio_s` of audio (and its session's cancel)."""
    audio = np.zeros(int(audio_s * SAMPLE_RATE), np.float32)
    return Tick("bench", (request("hop", 0, audio),), ("hop",) if cancel else ())
