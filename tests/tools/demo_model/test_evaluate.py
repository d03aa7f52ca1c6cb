"""Word error rate as the accuracy tests and the training report count it."""

from __future__ import annotations

import pytest

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
