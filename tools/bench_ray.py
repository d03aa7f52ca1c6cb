"""Engine replicas on Ray Serve against the in-process engine, side by side in one run.

Three targets share one workload and this machine's cores: the in-process engine (all
cores), one replica (all cores) and two replicas (half each). For each: the latency of
lone finals one after another (so `one replica - in-process` is what the Ray hop adds to
a request) and the throughput of a burst of finals from many sessions. The hop itself is
timed apart (a tick call carrying one request of 0-15 s of audio), with the bytes a
request and a result take on the wire and the gateway's CPU per request.

The command line is scripts/bench_ray.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import platform
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine.backends.registry import BackendOptions
from engine.client import EngineClient
from engine.remote.messages import LOCAL_CLUSTER_ENV, Tick
from engine.serving.async_engine import AsyncEngine
from engine.serving.builder import EngineConfig, build_engine_parts
from engine.serving.tuning_cache import cpu_identity, usable_cpus
from engine.types import SAMPLE_RATE, DecodeOptions, InferenceRequest, RequestKind
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
    ms = sorted(s * 1000 for s in seconds)
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 2),
        "p95_ms": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 2),
        "mean_ms": round(statistics.fmean(ms), 2),
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


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True, help="a model dir (the full test model)")
    p.add_argument("--precision", default="int8")
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--utterances", type=int, default=48)
    p.add_argument("--sessions", type=int, default=16)
    p.add_argument("--serial", type=int, default=21)
    p.add_argument("--hops", type=int, default=50)
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache/sensestream/speech")
    p.add_argument("--json", type=Path, default=Path("benchmarks/ray-replicas.json"))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    os.environ.update(LOCAL_CLUSTER_ENV)  # before Ray is imported (tools.bench_ray_remote)
    from tools.bench_ray_remote import ray_targets, ray_version

    cores = usable_cpus()
    clips = utterances(args.utterances, args.cache)
    targets = [in_process(engine_config(args, cores), clips, args)]
    hops: list[dict[str, Any]] = []
    targets += ray_targets(args, clips, cores, hops)
    report = {
        "what": "engine replicas on Ray Serve vs the in-process engine, same cores, one run",
        "model": str(args.model),
        "precision": args.precision,
        "max_batch": args.max_batch,
        "ray": ray_version(),
        "machine": {"cpus": cores, "platform": platform.platform(), "cpu": cpu_identity()},
        "targets": targets,
        "hop": hops,
        "ratios": ratios(targets),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({"targets": targets, "hop": hops, "ratios": report["ratios"]}, indent=1))
    return 0


def ratios(targets: Sequence[dict[str, Any]]) -> dict[str, float]:
    by = {t["target"]: t for t in targets}
    local, one, two = by["in-process"], by["1 replica"], by["2 replicas"]

    def rate(t: dict[str, Any]) -> float:
        return float(t["burst"]["audio_s_per_s"])

    def lone(t: dict[str, Any]) -> float:
        return float(t["serial_4s_final"]["p50_ms"])

    return {
        "throughput_1_replica_over_in_process": round(rate(one) / rate(local), 3),
        "throughput_2_replicas_over_1": round(rate(two) / rate(one), 3),
        "throughput_2_replicas_over_in_process": round(rate(two) / rate(local), 3),
        "lone_final_added_ms_1_replica": round(lone(one) - lone(local), 2),
    }


def wire_bytes(message: object) -> int:
    return len(pickle.dumps(message, protocol=5))


def tick_of(audio_s: float, *, cancel: bool = True) -> Tick:
    """A tick with one request of `audio_s` of audio (and its session's cancel)."""
    audio = np.zeros(int(audio_s * SAMPLE_RATE), np.float32)
    return Tick("bench", (request("hop", 0, audio),), ("hop",) if cancel else ())
