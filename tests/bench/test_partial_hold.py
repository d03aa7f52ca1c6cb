"""The partial-hold benchmark's measures: word edits, and the final's words over a span."""

from __future__ import annotations

from engine.types import Token, Transcript
from streaming.events import Final, Partial
from tools.bench.partial_hold import edit_distance, final_words_until, revisions

FINAL = Transcript(
    "the cat sat",
    "en",
    "neutral",
    "speech",
    False,
    "the cat sat",
    (Token(1, " the", 0, 200), Token(2, " cat", 300, 600), Token(3, " sat", 700, 900)),
)


def test_edit_distance_counts_word_edits() -> None:
    assert edit_distance(["a", "b", "c"], ["a", "b", "c"]) == 0
    assert edit_distance(["a", "x", "c"], ["a", "b", "c"]) == 1
    assert edit_distance([], ["a", "b"]) == 2
    assert edit_distance(["a", "b", "c", "d"], ["b", "c"]) == 2


def test_a_partial_is_held_to_the_finals_words_over_its_own_span() -> None:
    assert final_words_until(FINAL, 650) == ["the", "cat"]
    final = Final(1, 1000, 2000, FINAL)
    shown = [Partial(1, 1000, 1650, "the cap", 0), Partial(1, 1000, 2000, "the cat sat", 0)]
    assert revisions(shown, [final]) == (1, 5)
    assert revisions([Partial(2, 0, 500, "other", 0)], [final]) == (0, 0)  # no final: skipped
