"""Captions: where they go (stdout, a file, a folder), their formats and the error lines."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from sensestream.client import Outcome

FORMATS = ("text", "jsonl", "srt", "vtt")
EXTENSIONS = {"text": "txt", "jsonl": "jsonl", "srt": "srt", "vtt": "vtt"}


@dataclass
class StreamResult:
    """Everything one file's session produced."""

    file: Path
    finals: list[dict[str, Any]] = field(default_factory=list)
    partials: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    ended: bool = False
    close_code: int | None = None
    gaps: list[float] = field(default_factory=list)  # with --resume: each drop's gap (s)

    @property
    def succeeded(self) -> bool:
        return self.ended and not self.errors

    def fail(self, code: str, message: str) -> StreamResult:
        self.errors.append({"code": code, "message": message})
        return self

    def absorb(self, outcome: Outcome) -> None:
        """What the server sent: finals, the partial count, error events and `end`."""
        self.finals.extend(outcome.of("final"))
        self.partials += len(outcome.of("partial"))
        self.errors.extend(outcome.of("error"))
        for message in outcome.malformed:
            self.fail("bad_message", f"not a JSON event: {message!r}")
        self.ended = outcome.ended
        self.close_code = outcome.close_code


@dataclass(frozen=True)
class OutputPlan:
    """Where the captions go; decided once, before any audio is sent."""

    live: bool  # redraw the partial on stderr
    live_finals: bool  # print finals above the partial line
    stdout: bool  # the chosen format goes to stdout at the end
    out_dir: Path | None = None
    out_file: Path | None = None


def fmt_time(ms: int, sep: str) -> str:
    hours, rest = divmod(int(ms), 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{sep}{millis:03d}"


def channel_tag(event: dict[str, Any]) -> str:
    """Who said it: `[label] ` for an event of a multichannel stream (it names its
    channel), `[S1] ` for a final that names its speaker, `[label S1] ` for both; else ""."""
    label = event.get("label", event.get("channel"))
    who = [str(part) for part in (label, event.get("speaker")) if part is not None]
    return f"[{' '.join(who)}] " if who else ""


def render(result: StreamResult, fmt: str) -> str:
    """The finals of one stream in the chosen format (each text tagged with its channel)."""
    finals = [f for f in result.finals if f.get("text")]
    if fmt == "jsonl":
        return "".join(json.dumps(f, ensure_ascii=False) + "\n" for f in result.finals)
    if fmt == "text":
        return "".join(channel_tag(f) + f["text"] + "\n" for f in finals)
    cues = []
    # The channels' finals come as each is decided; cues go by their start.
    for i, f in enumerate(sorted(finals, key=lambda e: e["start_ms"]), 1):
        sep = "," if fmt == "srt" else "."
        span = f"{fmt_time(f['start_ms'], sep)} --> {fmt_time(f['end_ms'], sep)}"
        cues.append((f"{i}\n" if fmt == "srt" else "") + f"{span}\n{channel_tag(f)}{f['text']}\n")
    head = "WEBVTT\n\n" if fmt == "vtt" else ""
    return head + "\n".join(cues)


def out_is_dir(out: str, inputs: int) -> bool:
    """--out names a directory when it ends with a separator, is one, or takes several files."""
    seps = tuple(s for s in (os.sep, os.altsep) if s)
    return out.endswith(seps) or Path(out).is_dir() or inputs > 1


def plan_output(
    inputs: int, out: str | None, fmt: str, stderr_tty: bool, stdout_same_tty: bool
) -> OutputPlan:
    """Where captions go, so that a terminal shows each final once.

    With stdout on the terminal that shows the live view, plain text would repeat the
    finals already printed there, so the live view is the output; any other format is
    what was asked for, so it goes to stdout and the live view keeps only the partial.
    """
    live = inputs == 1 and stderr_tty
    if out is not None:
        if out_is_dir(out, inputs):
            return OutputPlan(live, live, stdout=False, out_dir=Path(out))
        return OutputPlan(live, live, stdout=False, out_file=Path(out))
    if live and stdout_same_tty:
        return OutputPlan(True, live_finals=fmt == "text", stdout=fmt != "text")
    return OutputPlan(live, live, stdout=True)


def same_terminal(a: TextIO, b: TextIO) -> bool:
    try:
        return (
            a.isatty()
            and b.isatty()
            and os.path.samestat(os.fstat(a.fileno()), os.fstat(b.fileno()))
        )
    except (AttributeError, OSError, ValueError):
        return False


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary name, so an interrupted run leaves no half-written captions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.part")
    try:
        part.write_text(text, encoding="utf-8")
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)


def save(result: StreamResult, plan: OutputPlan, fmt: str) -> None:
    """Write a succeeded stream's captions to --out; a failed one leaves no file."""
    if not result.succeeded:
        return
    target = plan.out_file
    if plan.out_dir is not None:
        target = plan.out_dir / f"{result.file.stem}.{EXTENSIONS[fmt]}"
    if target is None:
        return
    try:
        write_atomic(target, render(result, fmt))
    except OSError as exc:
        result.fail("write_failed", f"cannot write {target}: {exc.strerror or exc}")


def report(result: StreamResult) -> None:
    """One `FILE: error [code]: message` line on stderr per error, and one for the gaps
    of a stream that was resumed."""
    if result.gaps:
        gaps = ", ".join(f"{g:g} s" for g in result.gaps)
        print(f"{result.file}: resumed after {len(result.gaps)} drop(s): {gaps}", file=sys.stderr)
    for e in result.errors:
        print(f"{result.file}: error [{e.get('code')}]: {e.get('message')}", file=sys.stderr)
