"""CI's short soak: many short sessions over a steady one; fds, threads and tasks return
to what they were at rest after the warm-up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.server.conftest import REPO


def test_short_soak_leaves_resources_at_baseline(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    run = subprocess.run(
        [
            sys.executable,
            "scripts/soak.py",
            "--spawn-server",
            str(tiny_model_dir),
            "--sessions",
            "150",
            "--concurrency",
            "10",
            "--steady",
            "1",
            "--warmup",
            "50",
            "--max-rss-growth",
            "0.08",
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.exists(), run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert result["checks"]["no_errors"], result["errors"]
    assert result["checks"]["all_done"]
    assert result["checks"]["fds_back"] and result["checks"]["tasks_back"]
    assert result["checks"]["threads_back"]
    assert result["checks"]["rss_growth_ok"], result["rss_growth"]
    assert result["finals"] >= 150
    # Both readings were taken at rest: five samples in a row with no session open.
    for name in ("baseline", "final"):
        window = [s for s in result["timeline"] if s["t"] >= result[name]["t"]][:5]
        assert [s["sessions"] for s in window] == [0] * 5, (name, window)
    assert result["baseline"]["fds"] < max(s["fds"] for s in result["timeline"])
    assert run.returncode == 0
