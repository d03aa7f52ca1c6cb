"""The demo model's tools refuse to run without a speech engine they need."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
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


def test_festival_speaks_its_training_and_unseen_voices_and_takes_its_share() -> None:
    if shutil.which("text2wave") is None:
        pytest.skip("festival is not installed")
    trained = voices.Voice("festival", voices.FESTIVAL_TRAINING[0])
    slow = voices.speak("hello there", trained, voices.Prosody(tempo=0.8))
    fast = voices.speak("hello there", trained, voices.Prosody(tempo=1.25))
    assert 0.3 * voices.SAMPLE_RATE < len(fast) < 0.8 * len(slow) < 3 * voices.SAMPLE_RATE
    unseen = voices.speak("hello there", voices.UNSEEN_FESTIVAL)
    assert 0.3 * voices.SAMPLE_RATE < len(unseen) < 3 * voices.SAMPLE_RATE
    rng = random.Random(1)
    drawn = [voices.pick_training_voice(rng) for _ in range(3000)]
    share = sum(v.engine == "festival" for v in drawn) / len(drawn)
    expected = (
        (1 - voices.FLITE_SHARE) * voices.FESTIVAL_SHARE
        if shutil.which("flite")
        else voices.FESTIVAL_SHARE
    )
    assert abs(share - expected) < 0.03
    assert voices.UNSEEN_FESTIVAL not in drawn


def test_every_espeak_variant_speaks_and_none_is_an_unseen_voices() -> None:
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    for variant in voices.ESPEAK_VARIANTS:
        audio = voices.speak("one", voices.Voice("espeak", f"en-us+{variant}"))
        assert np.abs(audio).max() > 0.01, variant
    names = {v.name for v in voices.training_voices()}
    assert not names & {v.name for v in voices.UNSEEN}
    assert all(v in voices.training_voices() for v in voices.evaluation_voices())
