"""An utterance's text, tokens and tags made from its pieces' decodes.

Pieces are joined with a space, or with nothing where either side is Chinese or Japanese
(which write no spaces between words). Each piece's tokens move onto the utterance's clock,
and the first token of a piece carries the separator its text was joined with, so the
tokens still spell the text. The tags (language, emotion, event) are those of the longest
piece: the one the model heard most of.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from engine.types import SAMPLE_RATE, Token, Transcript


def _unspaced(ch: str) -> bool:
    """Han, kana, and CJK or full-width punctuation: scripts written without spaces."""
    code = ord(ch)
    return (
        0x3000 <= code <= 0x30FF
        or 0x3400 <= code <= 0x4DBF
        or 0x4E00 <= code <= 0x9FFF
        or 0xF900 <= code <= 0xFAFF
        or 0xFF00 <= code <= 0xFFEF
    )


def separator(before: str, after: str) -> str:
    """What goes between two pieces' texts."""
    if not before or not after or _unspaced(before[-1]) or _unspaced(after[0]):
        return ""
    return " "


def appended(before: str, after: str) -> str:
    return before + separator(before, after) + after


@dataclass(frozen=True, slots=True)
class Decoded:
    """One piece's decode: its stream samples and its transcript (on its own clock)."""

    start: int
    end: int
    transcript: Transcript


def composed(pieces: Sequence[Decoded], utt_start: int, itn: bool) -> Transcript:
    """The utterance's transcript: its pieces' texts and tokens in order, the longest's tags."""
    if not pieces:
        return Transcript("", "unknown", "unknown", "unknown", itn, "")
    text = rich = ""
    tokens: list[Token] = []
    for piece in pieces:
        t = piece.transcript
        shift = (piece.start - utt_start) * 1000 // SAMPLE_RATE
        sep = separator(text, t.text)
        moved = [replace(k, start_ms=k.start_ms + shift, end_ms=k.end_ms + shift) for k in t.tokens]
        if moved and t.text and text:  # the first token says how the piece was joined on
            moved[0] = replace(moved[0], text=sep + moved[0].text.lstrip(" "))
        text, rich = text + sep + t.text, appended(rich, t.rich_text)
        tokens += moved
    longest = max(pieces, key=lambda p: p.end - p.start).transcript
    return Transcript(text, longest.lang, longest.emotion, longest.event, itn, rich, tuple(tokens))
