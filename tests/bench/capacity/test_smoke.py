"""scripts/bench.py end to end: two 5 s live streams against spawned tiny-model servers."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_bench_spawn_smoke(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    png = tmp_path / "bench.png"
    plot = ["--plot", str(png)] if importlib.util.find_spec("matplotlib") else []
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "bench.py"),
            "--spawn-server",
            str(tiny_model_dir),
            "--server-args",
            "--precision fp32 --max-batch 4",
            "--streams",
            "2",
            "--duration",
            "5",
            "--speech-dir",
            str(tmp_path / "speech"),
            "--json",
            str(out),
            *plot,
        ],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert set(report["servers"]) == {"configured", "baseline"}
    assert "--max-batch 1" in " ".join(report["servers"]["baseline"]["command"])
    for name, server in report["servers"].items():
        (run,) = server["runs"]
        assert run["streams"] == 2, name
        assert run["errors"] == 0, (name, run["error_samples"])
        assert run["dropped_sessions"] == 0, name
        assert run["finals"] >= 1, (name, proc.stderr)
        latency = run["latency"]["final_ms"]
        assert latency["count"] >= 1, (name, run)
        assert latency["p50"] is not None, name
        assert run["client"]["cpu_s"] >= 0, name
        decoded = run["server"]["decoded_audio_s"]
        assert decoded.get("final", 0) + decoded.get("early", 0) > 0, (name, decoded)
    if plot:
        assert png.stat().st_size > 0
