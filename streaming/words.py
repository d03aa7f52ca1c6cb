"""Words made of a transcript's tokens, with how sure the model was of each.

A token whose text starts with a space starts a word; a CJK character is a word of its
own. A word's confidence is the least of its tokens' (a word is as doubtful as its most
doubtful piece; chosen by measurement, docs/benchmarks.md "Confidence"). A redacted token
has no confidence, so neither has its word: the placeholder never carries the value's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engine.types import Token


@dataclass(frozen=True, slots=True)
class Word:
    """One word on the utterance's clock; `confidence` from 0 to 1, None where unscored."""

    text: str
    start_ms: int
    end_ms: int
    confidence: float | None


def words_of(tokens: Iterable[Token]) -> tuple[Word, ...]:
    """The tokens joined into words (tokens with no text are skipped)."""
    out: list[Word] = []
    for token in tokens:
        text = token.text.strip()
        if not text:
            continue
        if out and not _starts_word(token):
            last = out[-1]
            out[-1] = Word(
                last.text + text,
                last.start_ms,
                token.end_ms,
                _least(last.confidence, token.confidence),
            )
        else:
            out.append(Word(text, token.start_ms, token.end_ms, token.confidence))
    return tuple(out)


def utterance_confidence(words: Sequence[Word]) -> float | None:
    """The mean confidence of the scored words (None when none is scored)."""
    scored = [w.confidence for w in words if w.confidence is not None]
    return math.fsum(scored) / len(scored) if scored else None


def _starts_word(token: Token) -> bool:
    """Whether a token begins a word: a leading space, or a CJK character."""
    return token.text[:1].isspace() or _is_cjk(token.text.strip()[:1])


def _is_cjk(char: str) -> bool:
    return bool(char) and (0x3000 <= ord(char) <= 0x9FFF or 0xAC00 <= ord(char) <= 0xD7AF)


def _least(a: float | None, b: float | None) -> float | None:
    # A word with an unscored (redacted) piece is unscored: its others would hint at it.
    return None if a is None or b is None else min(a, b)
