"""The demo model's tools refuse to run without a speech engine they need."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tools.demo_model import cli, voices


def only_espeak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        pytest.skip("espeak-ng is not installed")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "espeak-ng").symlink_to(espeak)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))


def test_without_flite_the_check_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    only_espeak(tmp_path, monkeypatch)
    with pytest.raises(voices.MissingSpeechEngine, match="apt-get install flite"):
        voices.check_engines()


def test_without_flite_the_cli_stops_before_making_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    only_espeak(tmp_path, monkeypatch)
    work = tmp_path / "work"
    assert cli.main(["data", "--work", str(work), "--utterances", "10"]) == 2
    assert "flite" in capsys.readouterr().err and not work.exists()
