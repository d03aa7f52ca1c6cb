"""Seconds from `python -m server` to /readyz 200, for this checkout and optionally another,
and optionally sherpa-onnx's non-streaming server on the same int8 weights.

Runs alternate between the servers (order flipped each round), so drift in the machine's
speed falls on all alike; every start after the first reuses what the first stored
(tuning and optimized graph), as a restart on the same host does, and the first is
reported apart. sherpa-onnx's server counts as ready when it logs the address it serves,
which it does once its recognizer is built; it needs the side environment and checkout of
`scripts/bench_server_peers.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from engine.backends.registry import ensure_onnx
from engine.model.directory import resolve_model
from tools.bench.common.cli import add_json, add_rounds, add_server_args, parser_for
from tools.bench.common.output import machine, write_json
from tools.bench.common.rounds import alternate
from tools.bench.peers import peer_servers, server_cli
from tools.bench.peers.cli import side_env_missing
from tools.bench.peers.sherpa_export import export_sherpa
from tools.spawn import ServerSpec, SpawnedServer

PEERS = Path.home() / ".cache/sensestream/peers"
SHERPA = "sherpa-onnx"


def time_to_ready(spec: ServerSpec) -> float:
    """Seconds from spawning the server to its first /readyz 200."""
    started = time.perf_counter()
    with SpawnedServer(spec) as server:
        server.wait_ready()
        return time.perf_counter() - started


def sherpa_timer(args: argparse.Namespace) -> Callable[[], float]:
    """Seconds from spawning sherpa-onnx's server until it serves, on our int8 weights."""
    model_dir = resolve_model(args.model)
    ensure_onnx(model_dir, "int8")
    exported = export_sherpa(model_dir, args.work / "sherpa-model", int8=True)
    extra = tuple(shlex.split(args.sherpa_args))

    def timed() -> float:
        started = time.perf_counter()
        with peer_servers.sherpa(
            args.sherpa_python, args.sherpa_examples, exported.model, exported.tokens, extra
        ):
            return time.perf_counter() - started

    return timed


def parser() -> argparse.ArgumentParser:
    p = parser_for(__doc__, whole=True)
    p.add_argument("--model", required=True, help="model dir (exports already built)")
    add_server_args(p)
    p.add_argument("--baseline-checkout", type=Path, help="another checkout to compare")
    p.add_argument("--sherpa", action="store_true", help="time sherpa-onnx's server too")
    p.add_argument("--sherpa-python", type=Path, default=PEERS / "sherpa/bin/python")
    p.add_argument(
        "--sherpa-examples", type=Path, default=PEERS / "sherpa-onnx/python-api-examples"
    )
    p.add_argument("--sherpa-args", default="--num-threads 2 --max-batch-size 1")
    p.add_argument("--work", type=Path, default=PEERS / "work", help="sherpa's export goes here")
    add_rounds(p, 6, "restarts of each server, taking turns")
    add_json(p)
    return p


def timers(
    args: argparse.Namespace, server_args: tuple[str, ...]
) -> tuple[dict[str, Callable[[], float]], dict[str, str]]:
    """What to time, by name, and where each name's server comes from."""
    checkouts = {"this": Path.cwd()}
    if args.baseline_checkout is not None:
        checkouts["baseline"] = args.baseline_checkout.resolve()
    found: dict[str, Callable[[], float]] = {}
    for name, cwd in checkouts.items():
        # PYTHONPATH too: an editable install would otherwise import this checkout's packages.
        env = {**os.environ, "PYTHONPATH": str(cwd)}
        spec = ServerSpec(server_args, python=sys.executable, cwd=cwd, env=env)
        found[name] = partial(time_to_ready, spec)
    sources = {name: str(path) for name, path in checkouts.items()}
    if args.sherpa:
        found[SHERPA] = sherpa_timer(args)
        sources[SHERPA] = str(args.sherpa_examples / "non_streaming_server.py")
    return found, sources


def sherpa_missing(args: argparse.Namespace) -> bool:
    """Say so, with how to set it up, when sherpa-onnx's environment or script is absent."""
    setup = server_cli.__doc__ or ""
    if side_env_missing(args.sherpa_python, setup):
        return True
    absent = peer_servers.missing_examples(args.sherpa_examples)
    if not absent:
        return False
    print(
        f"error: {args.sherpa_examples} lacks {', '.join(p.name for p in absent)}", file=sys.stderr
    )
    print(setup, file=sys.stderr)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.sherpa and sherpa_missing(args):
        return 2
    server_args = ("--model", args.model, *shlex.split(args.server_args))
    timed, sources = timers(args, server_args)
    first = {name: round(timer(), 3) for name, timer in timed.items()}
    runs: dict[str, list[float]] = {name: [] for name in timed}
    for _, name in alternate(list(timed), args.rounds):
        runs[name].append(round(timed[name](), 3))
    report = {
        **machine("cpu"),
        "server_args": list(server_args),
        "sherpa_args": shlex.split(args.sherpa_args) if args.sherpa else None,
        "checkouts": sources,  # for sherpa-onnx, its server script
        "first_start_s": first,
        "restart_s": runs,
        "restart_median_s": {name: statistics.median(v) for name, v in runs.items()},
    }
    print(json.dumps(report["restart_median_s"]))
    write_json(args.json, report, indent=1)
    return 0
