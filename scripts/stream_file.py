"""Replay audio files to a SenseStream server as live streams and print or save the captions.

Examples:
    python scripts/stream_file.py talk.wav --url ws://127.0.0.1:8765/ws
    python scripts/stream_file.py calls/*.wav --speed 0 --format srt --out subs/ --concurrency 8

stdout carries only the chosen --format; every diagnostic goes to stderr. An input's
captions are written (to stdout or --out) only when its stream ended with `end` and no
error; a failed input gets one `FILE: error [code]: message` line and no output.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import (
    ConnectionClosed,
    InvalidHandshake,
    InvalidStatus,
    InvalidURI,
    WebSocketException,
)
from websockets.uri import parse_uri

from engine.audio_io import read_audio
from engine.errors import AudioError
from engine.types import SAMPLE_RATE

FORMATS = ("text", "jsonl", "srt", "vtt")
EXTENSIONS = {"text": "txt", "jsonl": "jsonl", "srt": "srt", "vtt": "vtt"}
API_KEY_ENV = "SENSESTREAM_API_KEY"
OPEN_TIMEOUT_S = 10.0
REFUSALS = {401: "unauthorized", 403: "forbidden", 503: "unavailable"}
CLEAR_LINE = "\r\x1b[2K"


@dataclass
class StreamResult:
    """Everything one file's session produced."""

    file: Path
    finals: list[dict[str, Any]] = field(default_factory=list)
    partials: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    ended: bool = False
    close_code: int | None = None

    @property
    def succeeded(self) -> bool:
        return self.ended and not self.errors

    def fail(self, code: str, message: str) -> StreamResult:
        self.errors.append({"code": code, "message": message})
        return self


@dataclass(frozen=True)
class OutputPlan:
    """Where the captions go; decided once, before any audio is sent."""

    live: bool  # redraw the partial on stderr
    live_finals: bool  # print finals above the partial line
    stdout: bool  # the chosen format goes to stdout at the end
    out_dir: Path | None = None
    out_file: Path | None = None


# --- the live terminal line -------------------------------------------------------------


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


def live_line(text: str, columns: int) -> str:
    """`… ` and the end of a partial, narrower than the terminal so it can never wrap.

    The last column stays free: a line that fills it wraps on some terminals, and then
    the carriage return of the next redraw no longer reaches its start.
    """
    if columns < 4:
        return ""
    return "… " + fit_tail(printable(text), columns - 3)


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

    def partial(self, text: str) -> None:
        self._write(CLEAR_LINE + live_line(text, terminal_columns(self.stream)))
        self.drawn = True

    def final(self, event: dict[str, Any]) -> None:
        text = printable(str(event.get("text") or ""))
        if self.show_finals and text:
            self._write(f"{CLEAR_LINE}[{fmt_time(event.get('start_ms', 0), '.')}] {text}\n")
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


# --- one stream -------------------------------------------------------------------------


def pcm16(audio: np.ndarray) -> bytes:
    return (np.clip(audio, -1.0, 32767 / 32768) * 32768).astype("<i2").tobytes()


async def send_audio(ws: Any, audio: np.ndarray, chunk_ms: int, speed: float) -> None:
    """Send 16 kHz PCM frames, paced to `speed` times real time (0: as fast as possible)."""
    step = SAMPLE_RATE * chunk_ms // 1000
    started = time.monotonic()
    for i, begin in enumerate(range(0, len(audio), step)):
        if speed > 0:
            due = started + i * chunk_ms / 1000 / speed
            await asyncio.sleep(max(0.0, due - time.monotonic()))
        await ws.send(pcm16(audio[begin : begin + step]))
    await ws.send(json.dumps({"type": "stop"}))


async def receive(ws: Any, result: StreamResult, live: LiveView | None) -> None:
    """Collect events until `end` or the socket closes; show partials on one line."""
    async for message in ws:
        try:
            event = json.loads(message)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            result.fail("bad_message", f"not a JSON event: {str(message)[:80]!r}")
            continue
        kind = event.get("type")
        if kind == "partial":
            result.partials += 1
            if live is not None:
                live.partial(str(event.get("text") or ""))
        elif kind == "final":
            result.finals.append(event)
            if live is not None:
                live.final(event)
        elif kind == "error":
            result.errors.append(event)
        elif kind == "end":
            # The server closes next; reading on would only turn a 1008 close into a
            # second error for the one the `error` event already reported.
            result.ended = True
            return


def unreadable(path: Path) -> tuple[str, str] | None:
    """Why `path` cannot be opened, in words libsndfile does not find ("System error")."""
    if not path.exists():
        return "not_found", "no such file"
    if path.is_dir():
        return "not_a_file", "is a directory"
    if not os.access(path, os.R_OK):
        return "permission_denied", "permission denied"
    return None


def refusal(exc: InvalidStatus) -> tuple[str, str]:
    """A refused handshake as (code, message): the HTTP status and the body's first line."""
    status = exc.response.status_code
    body = bytes(exc.response.body or b"").decode("utf-8", "replace").strip()
    reason = body.splitlines()[0][:200] if body else exc.response.reason_phrase
    code = REFUSALS.get(status, f"http_{status}")
    return code, f"server refused the connection: {status} {reason}"


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """A connection failure as (code, message) for the one-line report."""
    if isinstance(exc, InvalidStatus):
        return refusal(exc)
    if isinstance(exc, InvalidURI):
        return "bad_url", str(exc)
    if isinstance(exc, InvalidHandshake):
        return "handshake", f"handshake failed: {exc}"
    if isinstance(exc, ConnectionClosed):
        return "connection", f"connection lost: {exc}"
    if isinstance(exc, TimeoutError):
        return "timeout", f"no answer from the server within {OPEN_TIMEOUT_S:g} s"
    if isinstance(exc, OSError):
        return "connection", exc.strerror or str(exc) or type(exc).__name__
    return "websocket", str(exc) or type(exc).__name__


async def run_session(
    audio: np.ndarray, args: argparse.Namespace, result: StreamResult, live: LiveView | None
) -> None:
    # Faster than real time is a replay; the server holds live streams to about real time.
    pace = "live" if 0 < args.speed <= 1.5 else "replay"
    start = {"type": "start", "language": args.language, "itn": args.itn, "pace": pace}
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else None
    async with connect(
        args.url,
        max_size=1 << 22,
        compression=None,
        additional_headers=headers,
        open_timeout=OPEN_TIMEOUT_S,
    ) as ws:
        await ws.send(json.dumps(start))
        sender = asyncio.create_task(send_audio(ws, audio, args.chunk_ms, args.speed))
        try:
            await receive(ws, result, live)
        finally:
            result.close_code = ws.close_code
            if not sender.done():
                sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
        if not sender.cancelled() and sender.exception() is not None and not result.ended:
            raise sender.exception()  # type: ignore[misc]


async def stream_one(path: Path, args: argparse.Namespace, live: LiveView | None) -> StreamResult:
    result = StreamResult(path)
    problem = unreadable(path)
    if problem is not None:
        return result.fail(*problem)
    try:
        audio = read_audio(path)
    except AudioError as exc:
        return result.fail(exc.code, str(exc))
    try:
        parse_uri(args.url)
    except InvalidURI as exc:
        return result.fail("bad_url", str(exc))
    except ValueError as exc:  # urllib's complaint, e.g. about a broken IPv6 address
        return result.fail("bad_url", f"{args.url} isn't a valid URI: {exc}")
    try:
        await run_session(audio, args, result, live)
    except (WebSocketException, OSError) as exc:
        result.fail(*describe_failure(exc))
    finally:
        if live is not None:
            live.clear()
    if not result.ended and not result.errors:
        code = result.close_code
        result.fail("incomplete", f"the server closed the stream before `end` (code {code})")
    return result


# --- output -----------------------------------------------------------------------------


def fmt_time(ms: int, sep: str) -> str:
    hours, rest = divmod(int(ms), 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{sep}{millis:03d}"


def render(result: StreamResult, fmt: str) -> str:
    """The finals of one stream in the chosen format."""
    finals = [f for f in result.finals if f.get("text")]
    if fmt == "jsonl":
        return "".join(json.dumps(f, ensure_ascii=False) + "\n" for f in result.finals)
    if fmt == "text":
        return "".join(f["text"] + "\n" for f in finals)
    cues = []
    for i, f in enumerate(finals, 1):
        sep = "," if fmt == "srt" else "."
        span = f"{fmt_time(f['start_ms'], sep)} --> {fmt_time(f['end_ms'], sep)}"
        cues.append((f"{i}\n" if fmt == "srt" else "") + f"{span}\n{f['text']}\n")
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
    for e in result.errors:
        print(f"{result.file}: error [{e.get('code')}]: {e.get('message')}", file=sys.stderr)


async def stream_all(args: argparse.Namespace, plan: OutputPlan) -> list[StreamResult]:
    gate = asyncio.Semaphore(args.concurrency)
    live = LiveView(sys.stderr, plan.live_finals) if plan.live else None

    async def guarded(path: Path) -> StreamResult:
        async with gate:
            result = await stream_one(path, args, live)
        # Each file is saved and reported as it finishes, so a long batch cut short
        # keeps what it finished.
        save(result, plan, args.format)
        report(result)
        return result

    return list(await asyncio.gather(*(guarded(p) for p in args.files)))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE")
    parser.add_argument("--url", default="ws://127.0.0.1:8765/ws")
    parser.add_argument("--api-key", default=None, help=f"Bearer key (default: ${API_KEY_ENV})")
    parser.add_argument("--speed", type=float, default=1.0, help="1 = real time, 0 = flat out")
    parser.add_argument("--chunk-ms", type=int, default=100)
    parser.add_argument("--language", default="auto")
    parser.add_argument("--itn", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--format", choices=FORMATS, default="text")
    parser.add_argument(
        "--out", default=None, help="file, or directory (ends with /, exists, or several inputs)"
    )
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args(argv)
    if args.speed < 0 or args.chunk_ms <= 0 or args.concurrency < 1:
        parser.error("--speed must be >= 0, --chunk-ms and --concurrency positive")
    if args.api_key is None:
        args.api_key = os.environ.get(API_KEY_ENV) or None
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    plan = plan_output(
        len(args.files),
        args.out,
        args.format,
        sys.stderr.isatty(),
        same_terminal(sys.stdout, sys.stderr),
    )
    if plan.out_dir is not None:
        try:
            plan.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            print(f"error: cannot create directory {plan.out_dir}: {exc}", file=sys.stderr)
            return 2
    try:
        results = asyncio.run(stream_all(args, plan))
    except KeyboardInterrupt:
        print(f"{CLEAR_LINE if plan.live else ''}interrupted", file=sys.stderr)
        return 130
    if plan.stdout:
        for r in results:
            if r.succeeded:
                sys.stdout.write(render(r, args.format))
        sys.stdout.flush()
    return 0 if all(r.succeeded for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
