"""scripts/bench.py's command line: parse, build the targets, run, write JSON and plot."""

from __future__ import annotations

import argparse
import contextlib
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tools.bench.capacity.config import BenchConfig, Criteria
from tools.bench.capacity.corpus import Clip, build_pool, default_speech_dir
from tools.bench.capacity.fake_engine import DeclaredCost
from tools.bench.capacity.load import raise_fd_limit
from tools.bench.capacity.report import TargetReport, build_report
from tools.bench.capacity.targets import (
    Search,
    Target,
    measure_targets,
    option_value,
    server_spec,
)
from tools.bench.capacity.workers import (
    ArmPlan,
    FakeEngineProcess,
    arm_targets,
    attached,
    workers_section,
)
from tools.bench.common.cli import add_api_key, add_json, add_server_args, counts
from tools.bench.common.output import write_json
from tools.bench.common.plot import need_matplotlib

DESCRIPTION = "Live-stream capacity: how many real-time streams one server holds."


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=DESCRIPTION)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a running server's ws://HOST:PORT/ws")
    where.add_argument("--spawn-server", metavar="MODEL_DIR", help="start the servers here")
    p.add_argument("--baseline-url", help="a second server (e.g. --max-batch 1) to compare")
    add_server_args(p)
    add_api_key(p)
    p.add_argument("--stats-url", help="http://HOST:PORT of /stats when on another port")
    p.add_argument("--baseline-stats-url", help="the same for --baseline-url")
    p.add_argument("--no-baseline", action="store_true", help="spawn only the configured one")
    add_arm_args(p)
    p.add_argument(
        "--streams", type=counts, default=[1], help="N[,N2,...]; the search starts at min"
    )
    p.add_argument("--duration", type=float, default=60.0, help="seconds per stream")
    p.add_argument("--speech-ratio", type=float, default=0.5, help="share of time speaking")
    p.add_argument("--partial-interval-ms", type=int, default=400, help="passed to spawned servers")
    p.add_argument(
        "--end-silence-ms",
        type=int,
        default=500,
        help="the server's VAD end-silence, subtracted from final latency (passed when spawning)",
    )
    p.add_argument(
        "--find-capacity", action="store_true", help="search for the largest N meeting the criteria"
    )
    p.add_argument("--max-streams", type=int, default=1024, help="capacity search limit")
    p.add_argument(
        "--max-final-latency-ms", type=float, default=1000.0, help="p95, end-silence subtracted"
    )
    p.add_argument("--max-partial-interval-ms", type=float, default=2000.0, help="p95")
    p.add_argument("--ramp-s", type=float, default=2.0, help="spread of connection starts")
    p.add_argument(
        "--drain-timeout-s", type=float, default=120.0, help="wait for `end` after `stop`"
    )
    p.add_argument(
        "--server-timeout-s", type=float, default=900.0, help="spawned server start-up limit"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--speech-dir", type=Path, default=default_speech_dir())
    p.add_argument(
        "--phrase-pause-ms",
        type=int,
        default=0,
        help="say each sentence in phrases of 3-6 words with this much quiet between them, "
        "like a call's clauses (0: each sentence whole)",
    )
    add_json(p)
    p.add_argument("--plot", type=Path, help="write a PNG plot here (needs matplotlib)")
    return p


def add_arm_args(p: argparse.ArgumentParser) -> None:
    """--workers and the declared-cost fake engine (tools.bench.capacity.workers)."""
    p.add_argument(
        "--workers",
        type=counts,
        default=[],
        help="N[,N2,...]: one spawned server per front-end worker count (`--workers N` "
        "appended to its options), the arms taking turns; no --max-batch 1 baseline",
    )
    p.add_argument(
        "--fake-engine-ms-per-s",
        type=float,
        metavar="MS",
        help="start one declared-cost fake engine (no model, no CPU) answering in MS per "
        "audio second (plus --fake-engine-fixed-ms) and attach every spawned server to it",
    )
    p.add_argument(
        "--fake-engine-fixed-ms", type=float, default=0.0, help="the fake engine's fixed cost"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = parser()
    args = p.parse_args(argv)
    if not 0.05 <= args.speech_ratio <= 0.95:
        p.error("--speech-ratio must be within 0.05..0.95")
    if not 0 <= args.phrase_pause_ms < args.end_silence_ms:
        # A pause as long as the end silence would end the utterance: the pool's clips
        # would no longer be one utterance each.
        p.error("--phrase-pause-ms must be within 0 and --end-silence-ms")
    if args.duration < 4:
        p.error("--duration must be at least 4 s (one utterance and the VAD's tail)")
    if (args.baseline_url or args.stats_url or args.baseline_stats_url) and not args.url:
        p.error("--baseline-url, --stats-url and --baseline-stats-url go with --url")
    problem = arm_problem(args)
    if problem is not None:
        p.error(problem)
    return args


def arm_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the --workers and fake-engine flags, if anything."""
    fake = args.fake_engine_ms_per_s is not None
    if (args.workers or fake) and not args.spawn_server:
        return "--workers and --fake-engine-ms-per-s go with --spawn-server"
    if len(set(args.workers)) != len(args.workers):
        return "--workers: each worker count once"
    server_args = shlex.split(args.server_args)
    if args.workers and option_value(server_args, "--workers") is not None:
        return "--workers: leave --workers out of --server-args"
    if fake and option_value(server_args, "--engine") is not None:
        return "--fake-engine-ms-per-s: leave --engine out of --server-args"
    if fake and min(args.fake_engine_ms_per_s, args.fake_engine_fixed_ms) < 0:
        return "the fake engine's costs cannot be negative"
    return None


def arm_plan(args: argparse.Namespace) -> ArmPlan:
    fake = None
    if args.fake_engine_ms_per_s is not None:
        fake = DeclaredCost(args.fake_engine_fixed_ms, args.fake_engine_ms_per_s)
    return ArmPlan(tuple(args.workers), fake, min(args.server_timeout_s, 60.0))


def bench_config(args: argparse.Namespace) -> BenchConfig:
    return BenchConfig(
        duration_s=args.duration,
        speech_ratio=args.speech_ratio,
        partial_interval_ms=args.partial_interval_ms,
        end_silence_ms=args.end_silence_ms,
        ramp_s=args.ramp_s,
        drain_timeout_s=args.drain_timeout_s,
        seed=args.seed,
        phrase_pause_ms=args.phrase_pause_ms,
        criteria=Criteria(args.max_final_latency_ms, args.max_partial_interval_ms),
    )


def make_targets(
    args: argparse.Namespace, config: BenchConfig, engine: FakeEngineProcess | None = None
) -> list[Target]:
    """The configured server and its baseline, by URL or as servers to spawn; with
    --workers one arm per count instead, and with a fake `engine` no baseline (its
    --max-batch 1 would mean nothing to the fake)."""
    if args.url:
        targets = [Target("configured", url=args.url, http_url=args.stats_url)]
        if args.baseline_url:
            targets.append(
                Target("baseline", url=args.baseline_url, http_url=args.baseline_stats_url)
            )
        return targets
    largest = max(*args.streams, args.max_streams if args.find_capacity else 1)
    server_args = shlex.split(args.server_args)
    spec = server_spec(args.spawn_server, server_args, config, largest, args.server_timeout_s)
    if args.workers:
        return arm_targets(spec, args.workers, engine)
    if engine is not None:
        return [Target("configured", spec=attached(spec, engine), beside=engine.beside)]
    targets = [Target("configured", spec=spec)]
    if not args.no_baseline:
        baseline = replace(spec, args=(*spec.args, "--max-batch", "1"))
        targets.append(Target("baseline", spec=baseline))
    return targets


def measure(
    args: argparse.Namespace, config: BenchConfig, plan: ArmPlan, pool: Sequence[Clip]
) -> list[TargetReport]:
    """Start the fake engine if asked, then every server, and measure them in turn."""
    search = Search(
        tuple(args.streams),
        args.find_capacity,
        args.max_streams,
        args.api_key,
        alternate=bool(plan.workers),
    )
    with contextlib.ExitStack() as stack:
        engine = None
        if plan.fake is not None:
            engine = stack.enter_context(FakeEngineProcess(plan.fake, plan.start_timeout_s))
            print(f"fake engine ({plan.fake.describe()}) on {engine.url}", file=sys.stderr)
        return measure_targets(make_targets(args, config, engine), pool, config, search)


def document(
    reports: Sequence[TargetReport], config: BenchConfig, pool: Sequence[Clip], plan: ArmPlan
) -> dict[str, Any]:
    """The JSON: build_report's, and with --workers or a fake engine its `workers` part."""
    report = build_report(reports, config, pool)
    if plan.workers or plan.fake is not None:
        report["workers"] = workers_section(reports, plan)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 when it completed (whatever the verdicts), 2 on a setup failure."""
    args = parse_args(argv)
    need_matplotlib(args.plot)
    config = bench_config(args)
    plan = arm_plan(args)
    raise_fd_limit()
    try:
        pool = build_pool(args.speech_dir, config.phrase_pause_ms, args.seed)
        reports = measure(args, config, plan, pool)
    except (RuntimeError, ValueError, subprocess.CalledProcessError) as exc:  # SpawnError too
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = document(reports, config, pool, plan)
    write_json(args.json, report, indent=1)
    if args.plot is not None:
        from tools.bench.capacity.plot import plot

        plot(reports, config.criteria, args.plot)
    for r in reports:
        print(f"{r.name}: capacity={r.capacity} largest passing N={r.largest_passing_streams}")
    if report["capacity_ratio"] is not None:  # configured over --max-batch 1
        print(f"capacity ratio: {report['capacity_ratio']}")
    for arm in report.get("workers", {}).get("arms", []):
        print(f"{arm['name']}: capacity over the first arm's {arm['capacity_ratio_to_first']}")
    return 0
