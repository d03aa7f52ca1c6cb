"""The live terminal line: one redrawn partial, cut to the terminal's width, finals above it."""

from __future__ import annotations

import os
import shutil
import unicodedata
from typing import Any, TextIO

from sensestream.stream.output import channel_tag, fmt_time

CLEAR_LINE = "\r\x1b[2K"


def char_width(char: str) -> int:
    """Terminal columns of one character: wide and fullwidth East Asian ones take two."""
    if unicodedata.combining(char) or unicodedata.category(char) in ("Cf", "Me", "Mn"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def display_width(text: str) -> int:
    return sum(char_width(c) for c in text)


def fit_tail(text: str, width: int) -> str:
    """The longest end of `text` that fits in `width` columns."""
    start, used = len(text), 0
    while start > 0 and used + char_width(text[start - 1]) <= width:
        used += char_width(text[start - 1])
        start -= 1
    # A mark whose base character was cut off would join the ellipsis.
    while start < len(text) and char_width(text[start]) == 0:
        start += 1
    return text[start:]


def printable(text: str) -> str:
    """Server text on one line, without control characters that could drive the terminal."""
    flat = " ".join(text.split())
    return "".join(c for c in flat if unicodedata.category(c) != "Cc")


def live_line(text: str, columns: int, tag: str = "") -> str:
    """`… `, the `tag` (a channel's) and the end of a partial, narrower than the terminal so
    it can never wrap.

    The last column stays free: a line that fills it wraps on some terminals, and then
    the carriage return of the next redraw no longer reaches its start.
    """
    if columns < 4:
        return ""
    tag = printable(tag) + " " if tag else ""  # printable() trims the tag's space
    room = columns - 3 - display_width(tag)
    if room < 1:  # a terminal too narrow for the tag shows the text alone
        tag, room = "", columns - 3
    return f"… {tag}" + fit_tail(printable(text), room)


def terminal_columns(stream: TextIO) -> int:
    """The width of the terminal `stream` draws on.

    shutil.get_terminal_size() asks stdout, which is often a file while stderr (where
    the live line goes) is the terminal; it stays the fallback.
    """
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        columns = 0
    return columns or shutil.get_terminal_size().columns


class LiveView:
    """One redrawn partial on a terminal, with finals printed above it if they are shown."""

    def __init__(self, stream: TextIO, show_finals: bool) -> None:
        self.stream = stream
        self.show_finals = show_finals
        self.drawn = False

    def show(self, event: dict[str, Any]) -> None:
        """Draw what a server event changes (partials and finals; the rest change nothing)."""
        if event["type"] == "partial":
            self.partial(str(event.get("text") or ""), channel_tag(event))
        elif event["type"] == "final":
            self.final(event)

    def partial(self, text: str, tag: str = "") -> None:
        self._write(CLEAR_LINE + live_line(text, terminal_columns(self.stream), tag))
        self.drawn = True

    def final(self, event: dict[str, Any]) -> None:
        text = printable(str(event.get("text") or ""))
        if self.show_finals and text:
            stamp = fmt_time(event.get("start_ms", 0), ".")
            self._write(f"{CLEAR_LINE}[{stamp}] {printable(channel_tag(event) + text)}\n")
            self.drawn = False
        else:
            self.clear()

    def clear(self) -> None:
        if self.drawn:
            self._write(CLEAR_LINE)
            self.drawn = False

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
