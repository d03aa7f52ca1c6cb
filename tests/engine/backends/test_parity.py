"""engine.backends.parity on the tiny model: identical backends agree fully; bad options exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.backends.parity import main, voice_like
from tests.engine.gpu import needs_cuda


def run(tiny: Path, tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "parity.json"
    code = main(["--model", str(tiny), "--seconds", "1,3", "--json", str(out), *extra])
    assert code == 0
    return json.loads(out.read_text())


def test_a_backend_agrees_with_itself(tiny_model_dir: Path, tmp_path: Path) -> None:
    report = run(tiny_model_dir, tmp_path, "--device", "cpu", "--precision", "fp32")
    assert report["reference"] == report["candidate"] == "torch-fp32-cpu"
    assert report["frame_agreement_mean"] == 1.0
    assert report["batched_frame_agreement_mean"] == 1.0
    assert report["tokens_equal"] == "4/4"
    assert [c["kind"] for c in report["clips"]] == ["voice", "noise", "voice", "noise"]


def test_int8_onnx_against_torch(tiny_model_dir: Path, tmp_path: Path) -> None:
    args = ("--backend", "onnx", "--device", "cpu", "--precision", "int8")
    report = run(tiny_model_dir, tmp_path, *args)
    assert report["candidate"] == "onnx-int8-cpu"
    assert 0.8 < report["frame_agreement_mean"] <= 1.0


def test_bad_options_exit_2(tiny_model_dir: Path) -> None:
    assert main(["--model", str(tiny_model_dir), "--device", "tpu"]) == 2


def test_voice_like_is_bounded_and_voiced() -> None:
    audio = voice_like(2.0)
    assert audio.dtype == np.float32 and audio.size == 32000
    assert 0.05 < float(np.abs(audio).max()) <= 1.0


@needs_cuda
@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_cuda_against_the_cpu(tiny_model_dir: Path, tmp_path: Path, precision: str) -> None:
    report = run(tiny_model_dir, tmp_path, "--device", "cuda", "--precision", precision)
    assert report["frame_agreement_mean"] > 0.9
