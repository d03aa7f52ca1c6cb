"""`scripts/bench_peers.py`: our engine against sherpa-onnx on the same weights.

It installs nothing: sherpa-onnx lives in a side environment made once with
`python3 -m venv ~/.cache/sensestream/peers/sherpa &&
~/.cache/sensestream/peers/sherpa/bin/pip install sherpa-onnx==1.12.40 numpy`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.backends.registry import ensure_onnx
from engine.model.directory import resolve_model
from tools.bench.common.cli import add_json, add_rounds, parser_for
from tools.bench.common.output import machine, write_json
from tools.bench.common.speech import make_clips, save_clips
from tools.bench.peers import rounds, scenarios
from tools.bench.peers.sherpa_export import export_sherpa

REPO = Path(__file__).resolve().parents[3]
DEFAULT_SHERPA = Path.home() / ".cache/sensestream/peers/sherpa/bin/python"


def parser() -> argparse.ArgumentParser:
    p = parser_for(__doc__, prog="scripts/bench_peers.py", whole=True)
    p.add_argument("--model", required=True, help="model dir (the full-size test model)")
    p.add_argument("--sherpa-python", type=Path, default=DEFAULT_SHERPA)
    p.add_argument("--precision", choices=["int8", "fp32"], default="int8")
    p.add_argument("--threads", type=int, default=2)
    add_rounds(p, 3)
    p.add_argument("--scenarios", default=",".join(scenarios.SCENARIOS))
    p.add_argument("--work", type=Path, default=Path.home() / ".cache/sensestream/peers/work")
    add_json(p, required=True)
    return p


def systems(args: argparse.Namespace, clips: Path) -> list[rounds.System]:
    model_dir = resolve_model(args.model)
    ensure_onnx(model_dir, args.precision)
    sherpa = export_sherpa(model_dir, args.work / "sherpa-model", int8=args.precision == "int8")
    common = ("--clips", str(clips), "--threads", str(args.threads))
    ours = (sys.executable, "-m", "tools.bench.peers.ours_worker", "--model", str(model_dir.path))
    peer: tuple[str, ...] = (str(args.sherpa_python), "-m", "tools.bench.peers.sherpa_worker")
    peer += ("--model", str(sherpa.model), "--tokens", str(sherpa.tokens))
    return [
        rounds.System("ours", (*ours, "--precision", args.precision, *common)),
        rounds.System("sherpa-onnx", (*peer, *common)),
    ]


def side_env_missing(python: Path, setup: str) -> bool:
    """Say so, with how to make it, when sherpa-onnx's side environment is not there."""
    if python.exists():
        return False
    print(f"error: no sherpa-onnx side environment at {python}", file=sys.stderr)
    print(setup, file=sys.stderr)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if side_env_missing(args.sherpa_python, __doc__ or ""):
        return 2
    clips = save_clips(args.work / "clips.npz", make_clips())
    chosen = [s for s in args.scenarios.split(",") if s]
    results = rounds.run_rounds(
        systems(args, clips),
        chosen,
        args.rounds,
        lambda system, scenario: rounds.run_worker(system, scenario, REPO),
    )
    table = rounds.medians(results)
    report: dict[str, Any] = {
        "machine": machine("cpus", "platform"),
        **machine("cpu"),
        "precision": args.precision,
        "threads": args.threads,
        "rounds": args.rounds,
        "medians": table,
        "ours_over_sherpa": rounds.ratios(table, "ours", "sherpa-onnx"),
        "results": [{k: v for k, v in r.items() if k != "texts"} for r in results],
    }
    write_json(args.json, report, indent=1)
    print(json.dumps(report["ours_over_sherpa"], indent=1))
    return 0
