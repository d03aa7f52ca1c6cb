"""The demo model's tools refuse to run without a speech engine they need."""

from __future__ import annotations

import random
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


def test_flite_voices_get_their_share_of_training_when_installed() -> None:
    if shutil.which("flite") is None:
        pytest.skip("flite is not installed")
    rng = random.Random(0)
    drawn = [voices.pick_training_voice(rng) for _ in range(2000)]
    share = sum(v.engine == "flite" for v in drawn) / len(drawn)
    assert abs(share - voices.FLITE_SHARE) < 0.04
    assert {v.name for v in drawn if v.engine == "flite"} == set(voices.FLITE_VOICES)
    assert not set(drawn) & set(voices.UNSEEN)


def test_without_flite_every_training_voice_is_espeak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    only_espeak(tmp_path, monkeypatch)
    rng = random.Random(0)
    assert {voices.pick_training_voice(rng).engine for _ in range(200)} == {"espeak"}
