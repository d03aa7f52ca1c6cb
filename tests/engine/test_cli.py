"""`python -m engine transcribe`: formats, per-file errors, output fields and timestamps."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from engine.cli import main
from tests.speech import Clip

FIELDS = {
    "file",
    "text",
    "lang",
    "emotion",
    "event",
    "rich_text",
    "tokens",
    "duration_s",
    "backend",
    "itn",
}


def run_cli(args: list[str]) -> tuple[int, list[dict]]:
    out = io.StringIO()
    code = main(args, out=out)
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bad")
    files = {
        "unreadable": folder / "notaudio.wav",
        "empty": folder / "empty.wav",
        "short": folder / "short.wav",
        "nan": folder / "nan.wav",
    }
    files["unreadable"].write_text("this is not audio")
    sf.write(files["empty"], np.zeros(0, np.float32), 16000)
    sf.write(files["short"], np.full(200, 0.1, np.float32), 16000)
    nan = np.full(16000, 0.1, np.float32)
    nan[100] = np.nan
    sf.write(files["nan"], nan, 16000, subtype="FLOAT")
    return files


def test_good_files_decode_beside_bad_ones(
    tiny_model_dir: Path, speech_clips: list[Clip], bad_files: dict[str, Path]
) -> None:
    good = [str(c.path) for c in speech_clips[:3]]
    bad = [str(p) for p in bad_files.values()]
    order = [good[0], bad[0], good[1], bad[1], bad[2], good[2], bad[3]]
    code, lines = run_cli(["transcribe", "--model", str(tiny_model_dir), *order])
    assert code == 1
    assert [line["file"] for line in lines] == order
    for line in lines:
        if line["file"] in good:
            assert set(line) == FIELDS
        else:
            assert line["error"]["code"] == "bad_audio"
            assert line["error"]["message"]
    messages = {
        Path(line["file"]).stem: line["error"]["message"] for line in lines if "error" in line
    }
    assert "empty" in messages["empty"].lower()
    assert "short" in messages["short"].lower()
    assert "finite" in messages["nan"].lower() or "nan" in messages["nan"].lower()


def test_result_fields_and_timestamps(tiny_model_dir: Path, speech_clips: list[Clip]) -> None:
    files = [str(c.path) for c in speech_clips]
    code, lines = run_cli(
        ["transcribe", "--model", str(tiny_model_dir), "--batch-size", "3", *files]
    )
    assert code == 0
    for clip, line in zip(speech_clips, lines, strict=True):
        assert line["duration_s"] == pytest.approx(clip.seconds, abs=1e-3)
        assert line["backend"] == "onnx-int8-cpu"
        assert "<|" not in line["text"]
        starts = [t["start_ms"] for t in line["tokens"]]
        assert starts == sorted(starts)
        for token in line["tokens"]:
            assert 0 <= token["start_ms"] <= token["end_ms"] <= clip.seconds * 1000


def test_batch_size_does_not_change_results(tiny_model_dir: Path, speech_clips: list[Clip]) -> None:
    files = [str(c.path) for c in speech_clips]
    base = ["transcribe", "--model", str(tiny_model_dir), "--backend", "torch"]
    _, one = run_cli([*base, "--batch-size", "1", *files])
    _, eight = run_cli([*base, "--batch-size", "8", *files])
    assert one == eight


def test_any_format_and_rate(
    tiny_model_dir: Path, speech_clips: list[Clip], tmp_path: Path
) -> None:
    audio = speech_clips[1].audio
    import soxr

    stereo44 = soxr.resample(audio, 16000, 44100)
    stereo44 = np.stack([stereo44, stereo44], axis=1)
    paths = {
        "flac": tmp_path / "a.flac",
        "ogg": tmp_path / "a.ogg",
        "mp3": tmp_path / "a.mp3",
        "wav8k": tmp_path / "a8k.wav",
    }
    sf.write(paths["flac"], stereo44, 44100)
    sf.write(paths["ogg"], stereo44, 44100, format="OGG", subtype="VORBIS")
    sf.write(paths["mp3"], stereo44, 44100, format="MP3")
    sf.write(paths["wav8k"], soxr.resample(audio, 16000, 8000), 8000)
    code, lines = run_cli(["transcribe", "--model", str(tiny_model_dir), *map(str, paths.values())])
    assert code == 0
    for line in lines:
        assert line["duration_s"] == pytest.approx(speech_clips[1].seconds, abs=0.1)


def test_missing_model_dir_is_a_setup_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["transcribe", "--model", str(tmp_path / "none"), "x.wav"], out=io.StringIO())
    assert code == 2
    assert "model_not_found" in capsys.readouterr().err


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_module_entry_point_prints_only_json_lines_whatever_a_library_prints(
    tiny_model_dir: Path, speech_clips: list[Clip], tmp_path: Path, backend: str
) -> None:
    # A broken ffmpeg on PATH makes funasr print its notice at import, as on a machine
    # without ffmpeg; a fresh copy makes the ONNX run export (which imports funasr) first.
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "ffmpeg").write_text("#!/bin/sh\nexit 1\n")
    (tools / "ffmpeg").chmod(0o755)
    model = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
    for onnx in model.glob("*.onnx"):
        onnx.unlink()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "transcribe",
            "--model",
            str(model),
            "--backend",
            backend,
            "--precision",
            "fp32",
            str(speech_clips[0].path),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    line = json.loads(lines[0])
    assert line["file"] == str(speech_clips[0].path)
    assert line["backend"] == f"{backend}-fp32-cpu"
