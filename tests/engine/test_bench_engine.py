"""tools.bench.engine on the tiny model: per-case memory against price and budget, targets."""

from __future__ import annotations

import json
from pathlib import Path

from tests.engine.gpu import needs_cuda
from tools.bench import engine as bench_engine


def run(tiny: Path, tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "engine.json"
    args = ["--model", str(tiny), "--batch", "1,2", "--seconds", "1,10", "--repeats", "1"]
    assert bench_engine.main([*args, "--json", str(out), *extra]) == 0
    return json.loads(out.read_text())


def test_cases_report_latency_throughput_and_memory(tiny_model_dir: Path, tmp_path: Path) -> None:
    report = run(tiny_model_dir, tmp_path, "--backend", "torch", "--feature-threads", "2")
    assert report["backend"] == "torch-fp32-cpu" and report["gpu"] is None
    assert report["memory_budget_bytes"] == 2 << 30
    assert len(report["cases"]) == 4
    for case in report["cases"]:
        assert case["model_ms"] > 0 and case["model_audio_s_per_s"] > 0
        assert case["priced_bytes"] > 0 and case["budget_bytes"] == 2 << 30
        assert case["admissible"] and case["within_budget"]
        assert case["peak_cuda_bytes"] is None
    targets = report["targets"]
    assert targets["batch1_10s_model_ms"] == report["cases"][2]["model_ms"]
    assert targets["batch1_10s_target_ms"] == 15.0 and targets["audio_s_per_s_target"] == 3000.0
    assert targets["best_batch"] in (1, 2)
    assert isinstance(targets["memory_within_budget"], bool)


def test_targets_without_the_ten_second_case() -> None:
    targets = bench_engine.targets([])
    assert targets["batch1_10s_model_ms"] is None and targets["batch1_10s_met"] is None
    assert targets["memory_within_budget"] is True


@needs_cuda
def test_cuda_fp16_reports_device_peaks(tiny_model_dir: Path, tmp_path: Path) -> None:
    report = run(
        tiny_model_dir, tmp_path, "--backend", "torch", "--device", "cuda", "--precision", "fp16"
    )
    assert report["backend"] == "torch-fp16-cuda" and report["gpu"]
    assert report["memory_budget_bytes"] < 2**40
    assert all(c["peak_device_bytes"] > 0 for c in report["cases"])
    assert report["targets"]["memory_within_price"]
