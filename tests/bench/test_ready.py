"""The ready benchmark times real server starts of two checkouts and writes its report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tools.bench.ready import main

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


FAKE_SHERPA = """
import argparse, sys, time
p = argparse.ArgumentParser()
p.add_argument("--port", type=int)
p.add_argument("--num-threads", type=int, required=True)
known, _ = p.parse_known_args()
time.sleep(0.3)  # building its recognizer
print(f"Please visit one of the following addresses: http://localhost:{known.port}", flush=True)
time.sleep(60)
"""


def fake_sherpa_examples(folder: Path) -> Path:
    """A stand-in for sherpa-onnx's python-api-examples: a server that serves after 0.3 s."""
    folder.mkdir()
    (folder / "non_streaming_server.py").write_text(FAKE_SHERPA)
    (folder / "http_server.py").write_text("")
    (folder / "web").mkdir()
    return folder


def test_times_sherpa_onnx_alongside_on_the_same_exported_weights(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(REPO)
    out = tmp_path / "ready.json"
    examples = fake_sherpa_examples(tmp_path / "examples")
    args = ["--model", str(tiny_model_dir), "--server-args", "--precision fp32 --max-batch 2",
            "--sherpa", "--sherpa-python", sys.executable, "--sherpa-examples", str(examples),
            "--work", str(tmp_path / "work"), "--rounds", "2", "--json", str(out)]  # fmt: skip
    assert main(args) == 0
    report = json.loads(out.read_text())
    assert list(report["restart_s"]) == ["this", "sherpa-onnx"]
    assert all(0.3 <= s < 30 for s in report["restart_s"]["sherpa-onnx"])
    assert report["sherpa_args"] == ["--num-threads", "2", "--max-batch-size", "1"]
    assert (tmp_path / "work" / "sherpa-model" / "tokens.txt").is_file()


def test_without_the_side_environment_it_says_how_to_make_it(
    tiny_model_dir: Path, tmp_path: Path, capsys
) -> None:
    missing = tmp_path / "no-venv" / "python"
    assert main(["--model", str(tiny_model_dir), "--sherpa", "--sherpa-python", str(missing)]) == 2
    assert "pip install" in capsys.readouterr().err
    no_script = ["--sherpa-python", sys.executable, "--sherpa-examples", str(tmp_path)]
    assert main(["--model", str(tiny_model_dir), "--sherpa", *no_script]) == 2
    assert "git clone" in capsys.readouterr().err
