"""FunASR's `timestamp` and `stamp_sents` fields from a final's timed tokens.

FunASR times one unit per Chinese (or Japanese) character or per word of space-delimited
text, never punctuation, and splits sentences at punctuation. SenseVoice tokens are BPE
pieces: a piece that starts with a space begins a word, and a piece may hold several
characters, which then share its time span evenly.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.types import Token

#: Characters that end a `stamp_sents` sentence (FunASR's `punc`).
SENTENCE_PUNCTUATION = frozenset(",.?!;:，。？！；：、…")
#: Punctuation that stays inside a number when digits follow at once ("3.5", "1,000", "9:30").
_NUMBER_JOINERS = frozenset(",.:")


@dataclass(frozen=True, slots=True)
class _Char:
    text: str
    start_ms: int
    end_ms: int
    boundary: bool  # a space comes before it


@dataclass(slots=True)
class Unit:
    """One timed unit: a CJK character or a word."""

    text: str
    start_ms: int
    end_ms: int


@dataclass(slots=True)
class Sentence:
    """Units up to and including their terminating punctuation (empty for the last)."""

    units: list[Unit] = field(default_factory=list)
    punc: str = ""

    def to_dict(self) -> dict[str, Any]:
        """One `stamp_sents` item."""
        return {
            "text_seg": " ".join(u.text for u in self.units),
            "punc": self.punc,
            "start": self.units[0].start_ms,
            "end": self.units[-1].end_ms,
            "ts_list": [[u.start_ms, u.end_ms] for u in self.units],
        }


def stamp_fields(tokens: Sequence[Token], offset_ms: int) -> dict[str, Any]:
    """`timestamp` (a string) and `stamp_sents`, on the stream clock; empty with no units."""
    sentences = split_sentences(tokens, offset_ms)
    pairs = [f"[{u.start_ms},{u.end_ms}]" for s in sentences for u in s.units]
    if not pairs:
        return {}
    return {
        "timestamp": "[" + ",".join(pairs) + "]",
        "stamp_sents": [s.to_dict() for s in sentences],
    }


def split_sentences(tokens: Sequence[Token], offset_ms: int) -> list[Sentence]:
    """Tokens (on the utterance clock) as sentences of timed units (on the stream clock)."""
    chars = list(_chars(tokens, offset_ms))
    done: list[Sentence] = []
    current = Sentence()
    word: Unit | None = None
    for i, char in enumerate(chars):
        if _is_cjk(char.text):
            word = None
            current.units.append(Unit(char.text, char.start_ms, char.end_ms))
        elif char.text in SENTENCE_PUNCTUATION and not _inside_number(chars, i, word):
            word = None
            if current.units:
                current.punc = char.text
                done.append(current)
                current = Sentence()
            elif done:
                done[-1].punc += char.text  # "?!": more punctuation for the same sentence
        elif word is None or char.boundary:
            word = Unit(char.text, char.start_ms, char.end_ms)
            current.units.append(word)
        else:
            word.text += char.text
            word.end_ms = char.end_ms
    if current.units:
        done.append(current)
    return done


def _chars(tokens: Sequence[Token], offset_ms: int) -> Iterator[_Char]:
    """Every visible character with its share of its token's span and word boundary."""
    boundary = False
    for token in tokens:
        boundary = boundary or token.text[:1].isspace()
        body = token.text.strip()
        start, span = offset_ms + token.start_ms, token.end_ms - token.start_ms
        for k, text in enumerate(body):
            if text.isspace():
                boundary = True
                continue
            begin = start + span * k // len(body)
            end = start + span * (k + 1) // len(body)
            yield _Char(text, begin, end, boundary)
            boundary = False


def _inside_number(chars: Sequence[_Char], i: int, word: Unit | None) -> bool:
    """A separator between digits of one number, as in "3.5" (not "3. 5")."""
    if chars[i].text not in _NUMBER_JOINERS or word is None or not word.text[-1:].isdigit():
        return False
    after = chars[i + 1] if i + 1 < len(chars) else None
    return after is not None and not after.boundary and after.text.isdigit()


def _is_cjk(char: str) -> bool:
    """Han ideographs and kana: each character is its own unit, as FunASR times them."""
    code = ord(char)
    return (
        0x3040 <= code <= 0x30FF  # hiragana, katakana
        or 0x3400 <= code <= 0x4DBF  # CJK extension A
        or 0x4E00 <= code <= 0x9FFF  # CJK unified ideographs
        or 0xF900 <= code <= 0xFAFF  # CJK compatibility ideographs
        or 0x20000 <= code <= 0x2FFFF  # CJK extensions B onwards
    )
