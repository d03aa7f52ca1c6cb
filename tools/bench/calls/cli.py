"""scripts/bench_calls.py's command line: spawn a server, run both arms, write JSON and plot.

Arm A: N two-party calls, each one stereo protocol-v1 stream (8 kHz μ-law, interleaved,
`multichannel: true`, channels labelled agent and customer). Arm B: the same calls as 2N
mono streams, each channel on its own socket, same audio, same pacing. Rounds alternate
A B, B A at each load level, so this machine's drift falls on both arms alike, and the
figures are pooled per arm; the report gives B/A ratios and the verdict against
docs/benchmarks.md's bounds (final p95 after the VAD, partial gap p95, no errors).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tools.bench.calls.audio import RATE, clip_audio, to_8k
from tools.bench.calls.calls import LABELS, TurnShape
from tools.bench.calls.rounds import measure_level
from tools.bench.capacity.config import BenchConfig, Criteria
from tools.bench.capacity.corpus import FRAME_MS, Clip, build_pool, default_speech_dir
from tools.bench.capacity.load import raise_fd_limit
from tools.bench.capacity.targets import LiveTarget, Target, server_spec
from tools.bench.common.cli import (
    add_api_key,
    add_json,
    add_rounds,
    add_server_args,
    counts,
    parser_for,
)
from tools.bench.common.output import machine, write_json
from tools.bench.common.plot import need_matplotlib

WHAT = "stereo calls (protocol v1, multichannel) against the same load as mono streams"


def parser() -> argparse.ArgumentParser:
    p = parser_for(__doc__)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--spawn-server", metavar="MODEL_DIR", help="start a server on this model")
    where.add_argument("--url", help="a running server's ws://HOST:PORT/ws")
    add_server_args(p)
    add_api_key(p)
    p.add_argument("--calls", type=counts, default=[4], help="N[,N2,...] calls per level")
    add_rounds(p, 4, "A/B pairs per level (order alternates)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds per call")
    p.add_argument("--partial-interval-ms", type=int, default=400, help="passed when spawning")
    p.add_argument("--end-silence-ms", type=int, default=500, help="passed when spawning")
    p.add_argument("--max-final-latency-ms", type=float, default=1000.0, help="p95, after VAD")
    p.add_argument("--max-partial-interval-ms", type=float, default=2000.0, help="p95")
    p.add_argument("--ramp-s", type=float, default=2.0, help="spread of call starts")
    p.add_argument("--drain-timeout-s", type=float, default=120.0, help="wait for `end`")
    p.add_argument("--server-timeout-s", type=float, default=900.0, help="start-up limit")
    p.add_argument("--seed", type=int, default=0, help="round r's calls use seed + r")
    p.add_argument("--speech-dir", type=Path, default=default_speech_dir())
    add_json(p)
    p.add_argument("--plot", type=Path, help="write a PNG here (needs matplotlib)")
    return p


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = parser()
    args = p.parse_args(argv)
    if args.duration < 8:
        p.error("--duration must be at least 8 s (a turn each and the VAD's tail)")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


def bench_config(args: argparse.Namespace) -> BenchConfig:
    return BenchConfig(
        duration_s=args.duration,
        speech_ratio=0.5,  # per channel, by turn-taking (tools.bench.calls.calls)
        partial_interval_ms=args.partial_interval_ms,
        end_silence_ms=args.end_silence_ms,
        ramp_s=args.ramp_s,
        drain_timeout_s=args.drain_timeout_s,
        seed=args.seed,
        criteria=Criteria(args.max_final_latency_ms, args.max_partial_interval_ms),
    )


def make_target(args: argparse.Namespace, config: BenchConfig) -> Target:
    """The server: spawned with room for every mono stream of the largest level, or a URL."""
    if args.url:
        return Target("server", url=args.url)
    sessions = 2 * max(args.calls) + 2
    server_args = shlex.split(args.server_args)
    spec = server_spec(args.spawn_server, server_args, config, sessions, args.server_timeout_s)
    return Target("server", spec=spec)


def source_state() -> dict[str, Any] | None:
    """The commit the server ran from, and the server-side files changed in the working
    tree (a shared tree moves under a benchmark); None outside a git checkout."""
    root = Path(__file__).resolve().parents[3]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        )
        status = subprocess.run(
            ["git", "status", "--porcelain", "--", "server", "streaming", "engine"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    changed = [line[3:] for line in status.stdout.splitlines() if line.strip()]
    return {"commit": head.stdout.strip(), "uncommitted_server_side_files": changed}


def document(
    target: LiveTarget, pool: Sequence[Clip], levels: list[Any], source: dict[str, Any] | None
) -> dict[str, Any]:
    """The JSON: settings, machine, server, every level with both arms and their ratios."""
    seconds = [c.seconds for c in pool]
    return {
        "what": WHAT,
        "argv": list(sys.argv[1:]),
        "config": asdict(target.config),
        "audio": {
            "sample_rate": RATE,
            "encoding": "mulaw",
            "frame_ms": FRAME_MS,
            "labels": list(LABELS),
            "pace": "real time",
        },
        "turns": asdict(TurnShape()),
        "host": machine("cpus", "cpu", "python")
        | {"note": "cpu_percent: 100 = one core; ratios are mono (B) over stereo (A)"},
        "source": source,  # as the server started
        "server": {
            "url": target.url,
            "command": target.target.command,
            "engine": (target.stats or {}).get("engine"),
            "end_silence_ms": target.end_silence,
            "end_silence_source": target.source,
        },
        "pool": {
            "utterances": len(pool),
            "seconds_min": round(min(seconds), 2),
            "seconds_mean": round(sum(seconds) / len(seconds), 2),
            "seconds_max": round(max(seconds), 2),
        },
        "levels": levels,
    }


def print_level(result: dict[str, Any]) -> None:
    a, b, r = result["stereo"], result["mono"], result["ratio_mono_over_stereo"]
    v = result["verdict"]
    print(
        f"{result['calls']} calls: stereo p50/p95 {a['final_after_vad_ms']['p50']}/"
        f"{a['final_after_vad_ms']['p95']} ms ({'pass' if v['calls_within_bounds'] else 'FAIL'})"
        f", mono {b['final_after_vad_ms']['p50']}/{b['final_after_vad_ms']['p95']} ms "
        f"({'pass' if v['mono_within_bounds'] else 'FAIL'}); B/A p95 "
        f"{r['final_after_vad_p95']}, cpu {r['server_cpu_percent']}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 when it completed (whatever the verdicts), 2 on a setup failure."""
    args = parse_args(argv)
    need_matplotlib(args.plot)
    config = bench_config(args)
    source = source_state()
    raise_fd_limit()
    try:
        pool = build_pool(args.speech_dir)
        clips = [to_8k(clip_audio(c)) for c in pool]
        target = LiveTarget(make_target(args, config), pool, config, args.api_key)
    except (RuntimeError, ValueError, subprocess.CalledProcessError) as exc:  # SpawnError too
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        levels = [
            measure_level(target.endpoint, clips, n, args.rounds, target.config) for n in args.calls
        ]
    finally:
        target.close()
    out = document(target, pool, levels, source)
    write_json(args.json, out, indent=1)
    if args.plot is not None:
        from tools.bench.calls.plot import plot

        plot(levels, target.config.criteria, args.plot)
    for result in levels:
        print_level(result)
    return 0
