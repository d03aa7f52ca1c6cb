"""scripts/bench.py's command line: parse, build the targets, run, write JSON and plot."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tools.bench.capacity.config import BenchConfig, Criteria
from tools.bench.capacity.corpus import build_pool, default_speech_dir
from tools.bench.capacity.load import raise_fd_limit
from tools.bench.capacity.report import build_report
from tools.bench.capacity.targets import Search, Target, measure_targets, server_spec
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
    add_json(p)
    p.add_argument("--plot", type=Path, help="write a PNG plot here (needs matplotlib)")
    return p


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = parser()
    args = p.parse_args(argv)
    if not 0.05 <= args.speech_ratio <= 0.95:
        p.error("--speech-ratio must be within 0.05..0.95")
    if args.duration < 4:
        p.error("--duration must be at least 4 s (one utterance and the VAD's tail)")
    if (args.baseline_url or args.stats_url or args.baseline_stats_url) and not args.url:
        p.error("--baseline-url, --stats-url and --baseline-stats-url go with --url")
    return args


def bench_config(args: argparse.Namespace) -> BenchConfig:
    return BenchConfig(
        duration_s=args.duration,
        speech_ratio=args.speech_ratio,
        partial_interval_ms=args.partial_interval_ms,
        end_silence_ms=args.end_silence_ms,
        ramp_s=args.ramp_s,
        drain_timeout_s=args.drain_timeout_s,
        seed=args.seed,
        criteria=Criteria(args.max_final_latency_ms, args.max_partial_interval_ms),
    )


def make_targets(args: argparse.Namespace, config: BenchConfig) -> list[Target]:
    """The configured server and its baseline, by URL or as servers to spawn."""
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
    targets = [Target("configured", spec=spec)]
    if not args.no_baseline:
        baseline = replace(spec, args=(*spec.args, "--max-batch", "1"))
        targets.append(Target("baseline", spec=baseline))
    return targets


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 when it completed (whatever the verdicts), 2 on a setup failure."""
    args = parse_args(argv)
    need_matplotlib(args.plot)
    config = bench_config(args)
    search = Search(tuple(args.streams), args.find_capacity, args.max_streams, args.api_key)
    raise_fd_limit()
    try:
        pool = build_pool(args.speech_dir)
        reports = measure_targets(make_targets(args, config), pool, config, search)
    except (RuntimeError, ValueError, subprocess.CalledProcessError) as exc:  # SpawnError too
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = build_report(reports, config, pool)
    write_json(args.json, report, indent=1)
    if args.plot is not None:
        from tools.bench.capacity.plot import plot

        plot(reports, config.criteria, args.plot)
    for r in reports:
        print(f"{r.name}: capacity={r.capacity} largest passing N={r.largest_passing_streams}")
    print(f"capacity ratio: {report['capacity_ratio']}")
    return 0
