"""The engine in its own process (a Unix socket) against the engine in the server's process.

Issue 36 puts one engine process per device behind front-end workers; what the hop costs
is measured here, side by side in one run on the same cores: a lone 4 s final's latency
(p50 and p95 over `--serial` requests, each with nothing else queued) and a burst of
finals from many sessions, for the in-process `AsyncEngine` and for a `RemoteEngine` over
`UnixTransport` to `python -m server.engines.process`. Rounds alternate the order.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine.remote.gateway import RemoteEngine
from engine.remote.unix import UnixTransport
from engine.serving.tuning_cache import usable_cpus
from tools.bench.common.cli import add_json, add_rounds, parser_for
from tools.bench.common.output import machine, write_json
from tools.bench.common.rounds import alternate
from tools.bench.ray.workload import engine_config, in_process, measure, utterances

ARMS = ("in-process", "engine process")
READY_LINE = "SenseStream engine listening on unix:"
START_TIMEOUT_S = 600.0


def engine_process(
    args: argparse.Namespace, threads: int, clips: Sequence[np.ndarray]
) -> dict[str, Any]:
    """The workload through a RemoteEngine to an engine process on a Unix socket."""
    folder = tempfile.mkdtemp(prefix="ss-bench-")
    socket_path = str(Path(folder) / "e.sock")
    command = [
        sys.executable, "-m", "server.engines.process", "--socket", socket_path,
        "--model", str(args.model), "--precision", args.precision,
        "--max-batch", str(args.max_batch), "--threads", str(threads),
    ]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as proc:
        try:
            wait_ready(proc)
            result = asyncio.run(through_socket(socket_path, clips, args))
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    return {"target": "engine process", "threads": threads} | result


def wait_ready(proc: subprocess.Popen[str]) -> None:
    """Until the engine process says it listens (it builds and warms the engine first)."""
    if proc.stdout is None:
        raise RuntimeError("no stdout to read the engine process's line from")
    for line in proc.stdout:
        if line.startswith(READY_LINE):
            return
    raise RuntimeError(f"the engine process ended before it listened (exit {proc.wait()})")


async def through_socket(
    path: str, clips: Sequence[np.ndarray], args: argparse.Namespace
) -> dict[str, Any]:
    engine = RemoteEngine(UnixTransport([path]))
    engine.start()
    try:
        await asyncio.wait_for(engine.attached(), START_TIMEOUT_S)
        return await measure(engine, clips, args)
    finally:
        await engine.close(timeout=30)


def parser() -> argparse.ArgumentParser:
    p = parser_for(__doc__)
    p.add_argument("--model", type=Path, required=True, help="a model dir (the full test model)")
    p.add_argument("--precision", default="int8")
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--utterances", type=int, default=48)
    p.add_argument("--sessions", type=int, default=16)
    p.add_argument("--serial", type=int, default=31, help="lone finals (the first is dropped)")
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache/sensestream/speech")
    add_rounds(p, default=2)
    add_json(p, default=Path("benchmarks/engine-process.json"))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    threads = usable_cpus()
    clips = utterances(args.utterances, args.cache)
    runs: list[dict[str, Any]] = []
    for round_no, arm in alternate(ARMS, args.rounds):
        if arm == "in-process":
            result = in_process(engine_config(args, threads), clips, args)
        else:
            result = engine_process(args, threads, clips)
        runs.append({"round": round_no} | result)
        print(json.dumps(runs[-1]), file=sys.stderr)
    report = {
        "what": "the engine in its own process over a Unix socket vs in the server's process",
        "model": str(args.model),
        "precision": args.precision,
        "max_batch": args.max_batch,
        "machine": machine("cpus", "platform", "cpu", "python"),
        "runs": runs,
        "ratios": ratios(runs),
    }
    print(write_json(args.json, report, indent=2))
    return 0


def ratios(runs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Medians over rounds: the lone final's added latency, and throughput's ratio."""

    def median(target: str, key: str, field: str) -> float:
        values = [float(r[key][field]) for r in runs if r["target"] == target]
        return float(np.median(values))

    lone = [median(t, "serial_4s_final", "p50_ms") for t in ARMS]
    rate = [median(t, "burst", "audio_s_per_s") for t in ARMS]
    return {
        "lone_final_p50_added_ms": round(lone[1] - lone[0], 2),
        "throughput_engine_process_over_in_process": round(rate[1] / rate[0], 3),
    }
