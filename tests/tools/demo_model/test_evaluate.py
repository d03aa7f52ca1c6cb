"""Word error rate as the accuracy tests and the training report count it, and the sets
that a candidate demo model is judged on."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from tools.demo_model import evaluate, voices
from tools.demo_model.evaluate import normalize, wer


def test_normalize_drops_case_and_edge_punctuation_but_keeps_number_forms() -> None:
    assert normalize("Your balance is $42.50.") == "your balance is $42.50"
    assert normalize("See you at 3:30 PM, Anna?") == "see you at 3:30 pm anna"
    assert normalize("Prices rose 5%.") == "prices rose 5%"
    assert normalize(" ... ") == ""


def test_wer_counts_substitutions_deletions_and_insertions_over_the_corpus() -> None:
    refs = ["the cat sat", "on the mat"]
    assert wer(refs, ["The cat sat.", "on the mat"]) == 0.0
    assert wer(refs, ["the dog sat", "on mat"]) == pytest.approx(2 / 6)
    assert wer(refs, ["", ""]) == 1.0
    assert wer(["a b"], ["a b c d"]) == 1.0


class RecordingVoices:
    """A speech engine that says every text as noise seeded by the text and the voice, and
    remembers which voice said which text."""

    def __init__(self) -> None:
        self.voice_of: dict[str, voices.Voice] = {}

    def speak(self, text: str, voice: voices.Voice) -> np.ndarray:
        self.voice_of[text] = voice
        seed = zlib.crc32(f"{voice.engine}/{voice.name}/{text}".encode())
        return np.random.default_rng(seed).uniform(-0.3, 0.3, 4000).astype(np.float32)


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> RecordingVoices:
    recording = RecordingVoices()
    monkeypatch.setattr(voices, "speak", recording.speak)
    return recording


def test_gate_sets_grow_the_shipped_sets_and_keep_their_first_items(
    engine: RecordingVoices,
) -> None:
    small = evaluate.eval_sets(seed=5, count=4)
    gate = evaluate.gate_sets(seed=5, count=4, size=10)
    for name in evaluate.SHIPPED_SETS:
        assert len(gate[name]) == 10
        first, kept = gate[name][: len(small[name])], small[name]
        assert [i.sentence for i in first] == [i.sentence for i in kept]
        assert all(np.array_equal(a.feats, b.feats) for a, b in zip(first, kept, strict=True))
        assert all(i.music == (name == "music") for i in gate[name])
    for name in ("open", "unseen_festival"):
        assert [i.sentence for i in gate[name]] == [i.sentence for i in small[name]]


def test_gate_sets_say_each_held_out_sentence_once_and_unseen_ones_in_unseen_voices(
    engine: RecordingVoices,
) -> None:
    gate = evaluate.gate_sets(seed=5, count=4, size=10)
    said = [i.sentence for name in evaluate.SHIPPED_SETS for i in gate[name]]
    assert len({s.spoken for s in said}) == len(said) == 30
    assert all(s.held_out for s in said)
    unseen = {engine.voice_of[i.sentence.voiced] for i in gate["unseen_voice"]}
    seen = {engine.voice_of[i.sentence.voiced] for i in gate["held_out"] + gate["music"]}
    assert unseen == set(voices.UNSEEN)
    assert seen <= set(voices.evaluation_voices()) and not seen & set(voices.UNSEEN)
