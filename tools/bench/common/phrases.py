"""Sentences cut into phrases, as a call's speaker says a sentence in clauses with pauses."""

from __future__ import annotations

import random


def phrase_sizes(words: int, sizes: tuple[int, int], rng: random.Random) -> list[int]:
    """How many words each phrase of a `words`-word sentence holds, each drawn at random
    within `sizes` (low, high) so that what is left can still make a phrase (where it
    cannot, the rest is one phrase); (0, 0): the whole sentence is one phrase."""
    low, high = sizes
    out: list[int] = []
    left = words
    while low > 0 and left > high and min(high, left - low) >= low:
        n = rng.randint(low, min(high, left - low))
        out.append(n)
        left -= n
    return [*out, left]


def phrase_texts(text: str, sizes: tuple[int, int], rng: random.Random) -> list[str]:
    """`text` cut into phrases of `sizes` words (see `phrase_sizes`). Text written without
    spaces (Chinese) is cut at its commas instead: a comma is where its speaker pauses."""
    words = text.split()
    if len(words) == 1:
        clauses = [c for c in text.replace("，", "，\n").split("\n") if c.strip()]
        return clauses
    out, at = [], 0
    for n in phrase_sizes(len(words), sizes, rng):
        out.append(" ".join(words[at : at + n]))
        at += n
    return out
