"""The server-wide hotwords file (`--hotwords-file`): phrases every session's decoding favours.

One phrase a line, optionally followed by a tab and its boost (default 2.0); blank lines
and lines starting with `#` are skipped. A session's own hotwords come first, then the
file's, up to the limit a request may carry.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from engine.decoding.hotwords import Speller
from engine.types import DEFAULT_HOTWORD_BOOST, Hotword
from streaming.commands import hotwords_from, merged_hotwords
from streaming.errors import InvalidFieldError


class HotwordsFileError(ValueError):
    """A hotwords file that cannot be read or holds a bad line; the message names it."""


def stream_refusal(
    speller: Speller, server: Sequence[Hotword], own: Sequence[Hotword]
) -> str | None:
    """Why a stream's hotwords are refused, checked with the file's that decoding adds to
    them: a list under the graph's cap alone may not be with the server's."""
    return speller.refusal(merged_hotwords(own, server))


def read_hotwords_file(path: str | Path) -> tuple[Hotword, ...]:
    """The file's hotwords, checked as a session's are (count, length, boost)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise HotwordsFileError(f"cannot read the hotwords file {path}: {exc}") from exc
    boosts: dict[str, float] = {}
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        phrase, _, boost = line.partition("\t")
        try:
            boosts.setdefault(
                phrase.strip(), float(boost) if boost.strip() else DEFAULT_HOTWORD_BOOST
            )
        except ValueError as exc:
            raise HotwordsFileError(
                f"{path}:{number}: the boost {boost!r} is not a number"
            ) from exc
    try:
        return hotwords_from(boosts)
    except InvalidFieldError as exc:
        raise HotwordsFileError(f"{path}: {exc}") from exc
