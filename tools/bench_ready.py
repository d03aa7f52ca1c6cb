"""Seconds from `python -m server` to /readyz 200, for this checkout and optionally another.

Runs alternate between the checkouts (order flipped each round), so drift in the
machine's speed falls on both alike; every start after the first reuses what the first
stored (tuning and optimized graph), as a restart on the same host does, and the first
is reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from engine.tuning_cache import cpu_identity
from tools.spawn import ServerSpec, SpawnedServer


def time_to_ready(spec: ServerSpec) -> float:
    """Seconds from spawning the server to its first /readyz 200."""
    started = time.perf_counter()
    with SpawnedServer(spec) as server:
        server.wait_ready()
        return time.perf_counter() - started


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", required=True, help="model dir (exports already built)")
    p.add_argument("--server-args", default="", help="more `python -m server` options")
    p.add_argument("--baseline-checkout", type=Path, help="another checkout to compare")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--json", type=Path, help="write the results here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    server_args = ("--model", args.model, *args.server_args.split())
    checkouts = {"this": Path.cwd()}
    if args.baseline_checkout is not None:
        checkouts["baseline"] = args.baseline_checkout.resolve()
    # PYTHONPATH too: an editable install would otherwise import this checkout's packages.
    specs = {
        name: ServerSpec(
            server_args, python=sys.executable, cwd=cwd, env={**os.environ, "PYTHONPATH": str(cwd)}
        )
        for name, cwd in checkouts.items()
    }
    first = {name: round(time_to_ready(spec), 3) for name, spec in specs.items()}
    runs: dict[str, list[float]] = {name: [] for name in specs}
    for round_index in range(args.rounds):
        order = list(specs) if round_index % 2 == 0 else list(reversed(specs))
        for name in order:
            runs[name].append(round(time_to_ready(specs[name]), 3))
    report = {
        "cpu": cpu_identity(),
        "server_args": list(server_args),
        "checkouts": {name: str(path) for name, path in checkouts.items()},
        "first_start_s": first,
        "restart_s": runs,
        "restart_median_s": {name: statistics.median(v) for name, v in runs.items()},
    }
    print(json.dumps(report["restart_median_s"]))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0
