"""Online speaker labels: voices kept apart, labels in order of appearance and never
changed, short pieces never opening a speaker, and the cap on speakers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.speakers.online import OnlineSpeakers, SpeakerPolicy
from tests.streaming.speakers.vectors import utterance, voices


def test_one_voice_is_one_speaker() -> None:
    rng = np.random.default_rng(1)
    (voice,) = voices(1, 0)
    speakers = OnlineSpeakers()
    labels = [speakers.label(utterance(voice, rng), 2.0)[0] for _ in range(30)]
    assert set(labels) == {"S1"} and speakers.count == 1


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), count=st.integers(2, 4))
def test_voices_get_labels_in_order_of_first_appearance(seed: int, count: int) -> None:
    rng = np.random.default_rng(seed)
    vs = voices(count, seed)
    order = [*range(count), *rng.integers(0, count, 20)]
    speakers = OnlineSpeakers()
    labels = [speakers.label(utterance(vs[k], rng), 2.0)[0] for k in order]
    assert labels[:count] == [f"S{k + 1}" for k in range(count)]
    assert labels == [f"S{k + 1}" for k in order]


def test_a_short_piece_joins_the_nearest_speaker_rather_than_opening_one() -> None:
    rng = np.random.default_rng(2)
    a, b = voices(2, 3)
    speakers = OnlineSpeakers(SpeakerPolicy(min_new_s=1.0))
    assert speakers.label(utterance(a, rng), 2.0)[0] == "S1"
    assert speakers.label(utterance(b, rng), 0.5)[0] == "S1"  # too short to open S2
    assert speakers.label(utterance(b, rng), 1.5)[0] == "S2"


def test_max_speakers_caps_the_labels() -> None:
    rng = np.random.default_rng(4)
    vs = voices(3, 5)
    speakers = OnlineSpeakers(SpeakerPolicy(max_speakers=2))
    labels = [speakers.label(utterance(v, rng), 2.0)[0] for v in vs]
    assert labels[:2] == ["S1", "S2"] and labels[2] in ("S1", "S2") and speakers.count == 2


def test_the_first_piece_of_a_speaker_scores_one_and_others_their_cosine() -> None:
    rng = np.random.default_rng(6)
    (voice,) = voices(1, 7)
    speakers = OnlineSpeakers()
    first = utterance(voice, rng)
    assert speakers.label(first, 2.0) == ("S1", 1.0)
    second = utterance(voice, rng)
    label, score = speakers.label(second, 2.0)
    assert label == "S1" and score == pytest.approx(float(first @ second))


@pytest.mark.parametrize(
    "policy", [{"threshold": 0.0}, {"threshold": 1.0}, {"max_speakers": 0}, {"min_new_s": -1}]
)
def test_bad_policies_are_refused(policy: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SpeakerPolicy(**policy)  # type: ignore[arg-type]
