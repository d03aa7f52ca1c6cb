"""Words from tokens: joined where no space starts a token, each as sure as its least
sure token; the final's score is its words' mean; a redacted token scores nothing."""

from __future__ import annotations

import math

import pytest

from engine.types import Token
from streaming.words import Word, utterance_confidence, words_of


def token(text: str, start: int, p: float | None) -> Token:
    return Token(1, text, start, start + 100, None if p is None else math.log(p))


def test_tokens_join_into_words_each_as_sure_as_its_least_sure_piece() -> None:
    tokens = [token(" Hel", 0, 0.9), token("lo", 100, 0.5), token(" you", 300, 0.8)]
    words = words_of(tokens)
    assert [(w.text, w.start_ms, w.end_ms) for w in words] == [("Hello", 0, 200), ("you", 300, 400)]
    assert [w.confidence for w in words] == pytest.approx([0.5, 0.8])
    assert utterance_confidence(words) == pytest.approx(0.65)


def test_cjk_characters_are_words_of_their_own_and_empty_tokens_are_skipped() -> None:
    tokens = [token("你", 0, 0.9), token("好", 100, 0.7), token("", 200, 0.1)]
    assert [(w.text, w.confidence) for w in words_of(tokens)] == [
        ("你", pytest.approx(0.9)),
        ("好", pytest.approx(0.7)),
    ]


def test_a_word_with_an_unscored_piece_is_unscored_and_left_out_of_the_mean() -> None:
    # A redacted token has no log-probability: its word tells nothing of what it hid.
    tokens = [token(" card", 0, 0.9), token(" [PCI", 100, None), token("]", 200, 0.2)]
    words = words_of(tokens)
    assert [w.confidence for w in words] == [pytest.approx(0.9), None]
    assert utterance_confidence(words) == pytest.approx(0.9)
    assert utterance_confidence([Word("x", 0, 1, None)]) is None
    assert utterance_confidence(()) is None
