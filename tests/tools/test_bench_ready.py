"""The ready benchmark times real server starts of two checkouts and writes its report."""

from __future__ import annotations

import json
from pathlib import Path

from tools.bench_ready import main

REPO = Path(__file__).resolve().parents[2]


def test_reports_first_start_and_alternating_restarts(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(REPO)
    out = tmp_path / "ready.json"
    args = ["--model", str(tiny_model_dir), "--server-args", "--precision fp32 --max-batch 2"]
    assert main([*args, "--baseline-checkout", str(REPO), "--rounds", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["first_start_s"]) == {"this", "baseline"}
    assert {name: len(runs) for name, runs in report["restart_s"].items()} == {
        "this": 1,
        "baseline": 1,
    }
    for runs in report["restart_s"].values():
        assert all(0 < seconds < 120 for seconds in runs)
    assert "|" in report["cpu"]  # model name and flags
