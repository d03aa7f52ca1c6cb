"""The speaker encoder: Resemblyzer's own numbers on closed-form signals, and real voices
told apart (espeak-ng and flite, made at test time)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.errors import BackendUnavailableError
from engine.serving.builder import open_speakers
from engine.speakers import encoder as encoder_module
from engine.speakers.encoder import LazySpeakerEncoder, SpeakerEncoder, louder, window_starts
from engine.speakers.features import MelFrames
from tools.demo_model.voices import Voice, speak
from tools.speakers.signals import SIGNALS, voiced

REFERENCE = Path(__file__).with_name("resemblyzer_reference.json")


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(REFERENCE.read_text())
    return data


@pytest.fixture(scope="module")
def encoder() -> SpeakerEncoder:
    return SpeakerEncoder()


def test_mel_frames_are_librosas(reference: dict[str, Any]) -> None:
    ours = MelFrames()(voiced(*SIGNALS["short"]))
    theirs = np.asarray(reference["mel_short"], np.float32)
    assert ours.shape == theirs.shape == (101, 40)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6 * float(theirs.max()))


def test_windows_are_resemblyzers(reference: dict[str, Any]) -> None:
    for length, starts in reference["window_starts"].items():
        assert window_starts(int(length)) == starts, length


def test_embeddings_are_resemblyzers(encoder: SpeakerEncoder, reference: dict[str, Any]) -> None:
    names = list(SIGNALS)
    ours = encoder.embed([voiced(*SIGNALS[n]) for n in names])
    for name, vector in zip(names, ours, strict=True):
        theirs = np.asarray(reference["embeddings"][name], np.float32)
        np.testing.assert_allclose(vector, theirs, atol=1e-5, err_msg=name)
    # One at a time or many at once: the same vectors.
    alone = encoder.embed([voiced(*SIGNALS["long"])])[0]
    np.testing.assert_allclose(alone, ours[names.index("long")], atol=1e-5)


def test_quiet_audio_is_raised_and_loud_audio_left_alone() -> None:
    quiet = np.full(1600, 0.001, np.float32)
    raised = louder(quiet)
    assert 20 * np.log10(np.sqrt(np.mean(raised**2))) == pytest.approx(-30.0, abs=0.01)
    loud = np.full(1600, 0.5, np.float32)
    assert louder(loud) is loud
    silence = np.zeros(1600, np.float32)
    assert louder(silence) is silence


def test_without_the_package_the_error_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(encoder_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(BackendUnavailableError, match="pip install --no-deps resemblyzer"):
        SpeakerEncoder()


def test_real_voices_are_nearest_their_own(encoder: SpeakerEncoder) -> None:
    # Three voices no two of which render one speaker: flite's US female and Scottish male,
    # and espeak-ng's default.
    voices = [Voice("flite", "slt"), Voice("flite", "awb"), Voice("espeak", "en-us")]
    sentences = ["Thank you for calling, how can I help you today?", "My order never arrived."]
    audio = [speak(text, voice) for voice in voices for text in sentences]
    vectors = encoder.embed(audio)
    similarity = vectors @ vectors.T
    np.fill_diagonal(similarity, -1.0)
    same = [k ^ 1 for k in range(len(audio))]  # each utterance's other sentence, same voice
    assert [int(np.argmax(row)) for row in similarity] == same, similarity.round(2)


def test_a_lazy_encoder_loads_at_its_first_use(encoder: SpeakerEncoder) -> None:
    lazy = LazySpeakerEncoder()
    assert not lazy.loaded
    audio = [voiced(*SIGNALS["high"])]
    np.testing.assert_allclose(lazy.embed(audio), encoder.embed(audio), atol=1e-6)
    assert lazy.loaded


def test_the_engine_loads_the_encoder_now_at_first_use_or_never() -> None:
    assert isinstance(open_speakers(True, "cpu"), SpeakerEncoder)
    assert isinstance(open_speakers(None, "cpu"), LazySpeakerEncoder)
    assert open_speakers(False, "cpu") is None
