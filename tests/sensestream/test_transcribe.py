"""`sensestream transcribe`: files through the server's own path in this process, one JSON
line each, an error line for a file that cannot be read, and exit codes that say so."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import soundfile

from sensestream.transcribe import main
from tests.speech import Clip

SR = 16000


def transcribe(*args: str, cwd: Path | None = None) -> tuple[int, list[dict[str, Any]], str]:
    """The command as a user runs it: its exit code, its JSON lines, its stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "sensestream", "transcribe", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=300,
    )
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def test_each_file_gets_a_line_and_a_bad_file_an_error_line(
    tiny_model_dir: Path, speech_clips: list[Clip], tmp_path: Path
) -> None:
    audio = np.concatenate([np.zeros(SR // 2, np.float32), speech_clips[0].audio, np.zeros(SR)])
    good, text, missing = tmp_path / "speech.wav", tmp_path / "notes.wav", tmp_path / "gone.wav"
    soundfile.write(good, audio, SR, subtype="PCM_16")
    text.write_text("not audio")
    model = ("--model", str(tiny_model_dir), "--precision", "fp32")
    code, lines, err = transcribe(str(good), str(text), *model, str(missing))
    assert code == 1, err  # one file or more failed
    assert [line["file"] for line in lines] == [str(good), str(text), str(missing)]
    first = lines[0]
    assert first["duration"] == round(len(audio) / SR, 3) and first["backend"]
    assert first["segments"] and first["text"] == " ".join(s["text"] for s in first["segments"])
    assert {w["word"] for w in first["words"]}  # word times, as verbose_json gives them
    assert lines[1]["error"]["code"] and "not an audio file" in lines[1]["error"]["message"]
    assert lines[2]["error"]["code"] == "unreadable"
    assert "gone.wav" in err


def test_bad_options_exit_2_and_load_nothing(tmp_path: Path) -> None:
    out = io.StringIO()
    code = main([str(tmp_path / "a.wav"), "--commit", "sometimes"], out=out)
    assert code == 2 and out.getvalue() == ""
