"""Scheduler under offered load: throughput and final latency for several max_batch values.

Poisson arrivals of whole utterances (2-12 s) at a given offered load (audio-seconds per
second) go through the real AsyncEngine. All max_batch values are measured in one run,
side by side, so their ratio is meaningful on a noisy machine.

The command line is scripts/bench_scheduler.py.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from engine.backends.registry import BackendOptions
from engine.decoding.recognizer import Recognizer
from engine.serving.async_engine import AsyncEngine
from engine.serving.builder import EngineConfig, build_engine_parts, speech_like
from engine.serving.scheduler import Scheduler
from engine.types import SAMPLE_RATE, DecodeOptions, InferenceRequest, RequestKind
from tools.bench.common.cli import add_json, parser_for
from tools.bench.common.output import write_json
from tools.bench.common.stats import spread


async def offered_load(
    recognizer: Recognizer, scheduler: Scheduler, load: float, duration: float, seed: int
) -> dict[str, Any]:
    """Submit finals as a Poisson process for `duration` s; measure until all are answered."""
    engine = AsyncEngine([recognizer], scheduler, ["cpu"])
    engine.start()
    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    pool = [speech_like(12.0, i) for i in range(4)]
    channel = engine.open_session("bench")
    sent: dict[int, float] = {}
    latencies: list[float] = []

    async def collect() -> None:
        while True:
            result = await channel.get()
            latencies.append(loop.time() - sent[result.ref.utterance_id])

    collector = asyncio.create_task(collect())
    audio_s = 0.0
    started = loop.time()
    utt = 0
    while loop.time() - started < duration:
        seconds = rng.uniform(2.0, 12.0)
        audio = pool[utt % len(pool)][: int(seconds * SAMPLE_RATE)]
        now = loop.time()
        engine.submit(
            InferenceRequest("bench", utt, RequestKind.FINAL, audio, DecodeOptions(), now)
        )
        sent[utt] = now
        audio_s += seconds
        utt += 1
        await asyncio.sleep(rng.expovariate(load / 7.0))  # mean utterance is 7 s
    await engine.close()  # returns once everything queued has been answered
    elapsed = loop.time() - started
    await asyncio.sleep(0)
    collector.cancel()
    return summarise(load, audio_s, elapsed, latencies, scheduler)


def summarise(
    load: float, audio_s: float, elapsed: float, latencies: list[float], scheduler: Scheduler
) -> dict[str, Any]:
    latency = spread(latencies)
    stats = scheduler.stats
    return {
        "offered_audio_s_per_s": load,
        "utterances": len(latencies),
        "throughput_audio_s_per_s": round(audio_s / elapsed, 2),
        "latency_p50_s": round(latency.p50, 3),
        "latency_p95_s": round(latency.p95, 3),
        "mean_batch": round(len(latencies) / max(stats.batches, 1), 2),
        "padding_efficiency": round(stats.padding_efficiency_sum / max(stats.batches, 1), 3),
    }


def fresh_scheduler(template: Scheduler, max_batch: int) -> Scheduler:
    config = replace(template.config, max_batch=max_batch)
    return Scheduler(config, template.budgets, template.cost, template.frames_of)


def main(argv: Sequence[str] | None = None) -> int:
    parser = parser_for(__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--backend", default="onnx")
    parser.add_argument("--precision", default="int8")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--max-batch", default="1,4,8,16")
    parser.add_argument("--load", default="4,8,12,16,24")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--max-wait-ms", type=float, default=20.0)
    add_json(parser, required=True)
    args = parser.parse_args(argv)
    backend = BackendOptions(args.backend, args.precision, "cpu", args.threads)
    config = EngineConfig(
        model=args.model, backend=backend, max_batch=1, max_wait_ms=args.max_wait_ms
    )
    parts = build_engine_parts(config)
    recognizer, template, report = parts.recognizers[0], parts.scheduler, parts.report
    rows: dict[str, list[dict[str, Any]]] = {}
    # Interleave max_batch values per load so slow drifts in the machine hit all alike.
    for load in (float(x) for x in args.load.split(",")):
        for max_batch in (int(x) for x in args.max_batch.split(",")):
            scheduler = fresh_scheduler(template, max_batch)
            row = asyncio.run(offered_load(recognizer, scheduler, load, args.duration, seed=1))
            rows.setdefault(str(max_batch), []).append(row)
            print(max_batch, json.dumps(row), flush=True)
    peak = {mb: max(r["throughput_audio_s_per_s"] for r in rs) for mb, rs in rows.items()}
    out = {
        "engine": report.to_dict(),
        "duration_s": args.duration,
        "max_wait_ms": args.max_wait_ms,
        "rows": rows,
        "peak_throughput": peak,
        "ratio_batch8_to_batch1": round(peak["8"] / peak["1"], 3)
        if "8" in peak and "1" in peak
        else None,
    }
    write_json(args.json, out, indent=2)
    print("peak throughput", peak, "ratio 8/1", out["ratio_batch8_to_batch1"])
    return 0
