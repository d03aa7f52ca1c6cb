"""`scripts/bench_server_peers.py`: our server against sherpa-onnx's non-streaming server.

Both serve the same int8 weights; N connections send whole utterances in a closed loop
(the next once the previous text is back), the two servers taking turns over rounds, each
started afresh and loaded only after the machine is quiet. It installs nothing:
sherpa-onnx's side environment also needs `websockets<14` (the server script uses the
legacy API), and the server script is in sherpa-onnx's repository:
    ~/.cache/sensestream/peers/sherpa/bin/pip install "websockets<14"
    git clone --depth 1 --branch v1.12.40 https://github.com/k2-fsa/sherpa-onnx \
        ~/.cache/sensestream/peers/sherpa-onnx
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from engine.backends.registry import ensure_onnx
from engine.model.directory import resolve_model
from tools.bench.common.cli import add_json, add_rounds, parser_for
from tools.bench.common.output import machine, write_json
from tools.bench.common.rounds import alternate
from tools.bench.common.speech import make_clips
from tools.bench.common.stats import medians_by
from tools.bench.peers import peer_servers
from tools.bench.peers.cli import side_env_missing
from tools.bench.peers.rounds import wait_quiet
from tools.bench.peers.server_clients import FunasrOfflineClient, SherpaClient, UtteranceClient
from tools.bench.peers.server_load import LoadResult, closed_loop
from tools.bench.peers.sherpa_export import export_sherpa

PEERS = Path.home() / ".cache/sensestream/peers"
Starter = Callable[[], AbstractContextManager[peer_servers.Running]]


def parser() -> argparse.ArgumentParser:
    p = parser_for(__doc__, prog="scripts/bench_server_peers.py", whole=True)
    p.add_argument("--model", required=True, help="model dir (the full-size test model)")
    p.add_argument("--sherpa-python", type=Path, default=PEERS / "sherpa/bin/python")
    p.add_argument(
        "--sherpa-examples", type=Path, default=PEERS / "sherpa-onnx/python-api-examples"
    )
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--per-connection", type=int, default=10)
    add_rounds(p, 2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--our-args", default="--precision int8", help="extra server options")
    p.add_argument("--sherpa-args", default="--max-batch-size 1", help="extra server options")
    p.add_argument("--work", type=Path, default=PEERS / "work")
    add_json(p, required=True)
    return p


def starters(args: argparse.Namespace) -> dict[str, Starter]:
    model_dir = resolve_model(args.model)
    ensure_onnx(model_dir, "int8")
    exported = export_sherpa(model_dir, args.work / "sherpa-model", int8=True)
    threads = str(args.threads)
    ours_args = ("--threads", threads, *shlex.split(args.our_args))
    sherpa_args = ("--num-threads", threads, *shlex.split(args.sherpa_args))
    return {
        "ours": lambda: peer_servers.ours(model_dir.path, ours_args),
        "sherpa-onnx": lambda: peer_servers.sherpa(
            args.sherpa_python, args.sherpa_examples, exported.model, exported.tokens, sherpa_args
        ),
    }


def client_for(system: str, url: str) -> Callable[[], UtteranceClient]:
    if system == "ours":
        return lambda: FunasrOfflineClient(url)
    return lambda: SherpaClient(url)


def one_run(
    system: str, start: Starter, clips: Sequence[np.ndarray], args: argparse.Namespace
) -> dict[str, Any]:
    """Start the server, warm it with two clips, then time the load and its CPU time."""
    with start() as running:
        make = client_for(system, running.url)
        asyncio.run(closed_loop(make, clips, 1, 2))
        process = psutil.Process(running.pid)
        before = process.cpu_times()
        result = asyncio.run(closed_loop(make, clips, args.connections, args.per_connection))
        after = process.cpu_times()
    cpu = (after.user - before.user) + (after.system - before.system)
    return summary(result, cpu)


def summary(result: LoadResult, cpu_s: float) -> dict[str, Any]:
    return {
        "audio_s_per_s": round(result.audio_s_per_s, 2),
        "latency_p50_s": round(result.latency_percentile(50), 3),
        "latency_p95_s": round(result.latency_percentile(95), 3),
        "cores_used": round(cpu_s / result.wall_s, 2),
        "utterances": len(result.latencies_s),
        "audio_s": round(result.audio_s, 1),
        "wall_s": round(result.wall_s, 2),
        "empty_texts": sum(1 for t in result.texts if not t.strip()),
    }


METRICS = ("audio_s_per_s", "latency_p50_s", "latency_p95_s", "cores_used")


def medians(results: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """system -> metric -> median over rounds."""
    return medians_by(results, ("system",), METRICS)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if side_env_missing(args.sherpa_python, __doc__ or ""):
        return 2
    clips = make_clips()
    systems = starters(args)
    results = []
    for number, system in alternate(list(systems), args.rounds):
        busy = wait_quiet()
        run = one_run(system, systems[system], clips, args)
        results.append({"round": number, "system": system, "busy_before": round(busy, 3)} | run)
        print(json.dumps(results[-1]), flush=True)
    table = medians(results)
    ours, peer = table["ours"], table["sherpa-onnx"]
    report = {
        "machine": machine("cpus", "platform"),
        **machine("cpu"),
        "load": {k: getattr(args, k) for k in ("connections", "per_connection", "rounds")},
        "servers": {"ours": args.our_args, "sherpa-onnx": args.sherpa_args},
        "threads": args.threads,
        "medians": table,
        "ours_over_sherpa": {
            "throughput": round(ours["audio_s_per_s"] / peer["audio_s_per_s"], 3),
            "p95_latency": round(peer["latency_p95_s"] / ours["latency_p95_s"], 3),
        },
        "results": results,
    }
    write_json(args.json, report, indent=1)
    print(json.dumps(report["ours_over_sherpa"], indent=1))
    return 0
