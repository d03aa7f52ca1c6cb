"""A lone final's latency: one server process against `--workers 2` (issue 36).

Two real servers run side by side on the same model, one `--workers 1` (the engine in
the server's process) and one `--workers 2` (a supervisor, two workers, an engine
process: two hops per request). Each round sends one 4 s stretch of speech cut from the
middle of a sentence (so the VAD cannot end it early) at replay pace with partials off,
then `stop`; the latency is from `stop` sent to the final received, with nothing else on
either server.
Rounds alternate the order; the first `--warmup` rounds are not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.client import connect

from tools.bench.common.cli import add_json, add_rounds, parser_for
from tools.bench.common.output import machine, write_json
from tools.bench.common.rounds import alternate
from tools.bench.common.speech import make_clips
from tools.bench.common.stats import percentiles
from tools.spawn import ServerSpec, SpawnedServer, spawn

FRAME = 3200  # 100 ms of 16 kHz s16le


def parser() -> argparse.ArgumentParser:
    p = parser_for(__doc__)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--precision", default="int8")
    p.add_argument("--seconds", type=float, default=4.0, help="the utterance's length")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--workers", default="1,2", help="the arms, as --workers values")
    add_rounds(p, default=30)
    add_json(p)
    return p


def server(args: argparse.Namespace, workers: str) -> SpawnedServer:
    options = ("--model", str(args.model), "--precision", args.precision)
    spec = ServerSpec((*options, "--workers", workers, "--log-level", "warning"))
    return spawn(spec)  # returns once /readyz says ready


async def one_final(url: str, pcm: bytes) -> float:
    """Seconds from `stop` to the final, on a fresh session."""
    async with connect(url, compression=None, max_size=None) as ws:
        # No partials: a partial still decoding at `stop` would hold the final behind it
        # (a bimodal spread of about 60 ms that hides the hop being measured).
        await ws.send(json.dumps({"type": "start", "pace": "replay", "partials": False}))
        await ws.recv()  # ready
        for i in range(0, len(pcm), FRAME):
            await ws.send(pcm[i : i + FRAME])
        await ws.send(json.dumps({"type": "stop"}))
        stopped = time.perf_counter()
        async for message in ws:
            if json.loads(message)["type"] == "final":
                return time.perf_counter() - stopped
    raise RuntimeError("the session ended without a final")


def measure(args: argparse.Namespace, urls: dict[str, str], pcm: bytes) -> dict[str, list[float]]:
    seen: dict[str, list[float]] = {arm: [] for arm in urls}
    rounds = args.rounds + args.warmup
    for round_no, arm in alternate(list(urls), rounds):
        latency_ms = 1000 * asyncio.run(one_final(urls[arm], pcm))
        if round_no >= args.warmup:
            seen[arm].append(latency_ms)
    return seen


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    (clip,) = make_clips(count=1, seed=36, low_s=args.seconds, high_s=args.seconds)
    pcm = (np.clip(clip, -1, 1) * 32767).astype("<i2").tobytes()
    arms = [w.strip() for w in args.workers.split(",")]
    servers = {arm: server(args, arm) for arm in arms}
    try:
        urls = {arm: s.url for arm, s in servers.items()}
        seen = measure(args, urls, pcm)
    finally:
        for s in servers.values():
            s.stop()
    table = {f"workers {arm}": asdict(percentiles(seen[arm])) for arm in arms}
    p50 = {arm: float(np.median(seen[arm])) for arm in arms}
    document: dict[str, Any] = {
        "benchmark": "lone final latency, one process against worker processes",
        "model": str(args.model),
        "precision": args.precision,
        "utterance_s": args.seconds,
        "rounds": args.rounds,
        "latency_ms": table,
        "added_p50_ms": {f"workers {a}": round(p50[a] - p50[arms[0]], 2) for a in arms[1:]},
        "samples_ms": {f"workers {a}": [round(v, 2) for v in seen[a]] for a in arms},
        "machine": machine("cpus", "platform", "cpu", "python"),
    }
    print(write_json(args.json, document))
    return 0
