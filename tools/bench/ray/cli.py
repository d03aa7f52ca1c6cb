"""scripts/bench_ray.py's command line: the in-process engine, then one and two replicas on
a loopback Ray cluster, each running the same workload; the JSON and its ratios."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.remote.messages import LOCAL_CLUSTER_ENV
from engine.serving.tuning_cache import usable_cpus
from tools.bench import ray as package
from tools.bench.common.cli import add_json, parser_for
from tools.bench.common.output import machine, write_json
from tools.bench.ray.workload import engine_config, in_process, utterances


def parser() -> argparse.ArgumentParser:
    p = parser_for(package.__doc__)
    p.add_argument("--model", type=Path, required=True, help="a model dir (the full test model)")
    p.add_argument("--precision", default="int8")
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--utterances", type=int, default=48)
    p.add_argument("--sessions", type=int, default=16)
    p.add_argument("--serial", type=int, default=21)
    p.add_argument("--hops", type=int, default=50)
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache/sensestream/speech")
    add_json(p, default=Path("benchmarks/ray-replicas.json"))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    os.environ.update(LOCAL_CLUSTER_ENV)  # before Ray is imported (tools.bench.ray.replicas)
    from tools.bench.ray.replicas import ray_targets, ray_version

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
        "machine": machine("cpus", "platform", "cpu"),
        "targets": targets,
        "hop": hops,
        "ratios": ratios(targets),
    }
    write_json(args.json, report, indent=2)
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
