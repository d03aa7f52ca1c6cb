"""Replay audio files to a SenseStream server as live streams and print or save the captions.

Examples:
    python scripts/stream_file.py talk.wav --url ws://127.0.0.1:8765/ws
    python scripts/stream_file.py calls/*.wav --speed 0 --format srt --out subs/ --concurrency 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from engine.audio_io import read_audio
from engine.errors import AudioError
from engine.types import SAMPLE_RATE

FORMATS = ("text", "jsonl", "srt", "vtt")


@dataclass
class StreamResult:
    """Everything one file's session produced."""

    file: Path
    finals: list[dict[str, Any]] = field(default_factory=list)
    partials: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    ended: bool = False
    close_code: int | None = None


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


async def receive(ws: Any, result: StreamResult, live: TextIO | None) -> None:
    """Collect events until `end` or the socket closes; show partials on one line."""
    async for message in ws:
        event = json.loads(message)
        kind = event.get("type")
        if kind == "partial":
            result.partials += 1
            if live is not None:
                live.write(f"\r\x1b[2K… {event['text'][-100:]}")
                live.flush()
        elif kind == "final":
            result.finals.append(event)
            if live is not None:
                live.write(f"\r\x1b[2K[{fmt_time(event['start_ms'], '.')}] {event['text']}\n")
                live.flush()
        elif kind == "error":
            result.errors.append(event)
        elif kind == "end":
            result.ended = True


async def stream_one(path: Path, args: argparse.Namespace, live: TextIO | None) -> StreamResult:
    result = StreamResult(path)
    try:
        audio = read_audio(path)
    except AudioError as exc:
        result.errors.append({"code": exc.code, "message": str(exc)})
        return result
    # Faster than real time is a replay; the server holds live streams to about real time.
    pace = "live" if 0 < args.speed <= 1.5 else "replay"
    start = {"type": "start", "language": args.language, "itn": args.itn, "pace": pace}
    try:
        async with connect(args.url, max_size=1 << 22, compression=None) as ws:
            await ws.send(json.dumps(start))
            sender = asyncio.create_task(send_audio(ws, audio, args.chunk_ms, args.speed))
            await receive(ws, result, live)
            result.close_code = ws.close_code
            if not sender.done():
                sender.cancel()
            elif sender.exception() is not None and not result.ended:
                raise sender.exception()  # type: ignore[misc]
    except (OSError, ConnectionClosed) as exc:
        result.errors.append({"code": "connection", "message": str(exc)})
    return result


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


def write_outputs(results: list[StreamResult], args: argparse.Namespace) -> None:
    ext = {"text": "txt", "jsonl": "jsonl", "srt": "srt", "vtt": "vtt"}[args.format]
    if args.out is None:
        for r in results:
            sys.stdout.write(render(r, args.format))
        return
    out = Path(args.out)
    if len(results) == 1 and not out.is_dir():
        out.write_text(render(results[0], args.format), encoding="utf-8")
        return
    out.mkdir(parents=True, exist_ok=True)
    for r in results:
        (out / f"{r.file.stem}.{ext}").write_text(render(r, args.format), encoding="utf-8")


async def stream_all(args: argparse.Namespace) -> list[StreamResult]:
    gate = asyncio.Semaphore(args.concurrency)
    single_tty = len(args.files) == 1 and sys.stderr.isatty()
    live = sys.stderr if single_tty else None

    async def guarded(path: Path) -> StreamResult:
        async with gate:
            return await stream_one(path, args, live)

    return list(await asyncio.gather(*(guarded(p) for p in args.files)))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE")
    parser.add_argument("--url", default="ws://127.0.0.1:8765/ws")
    parser.add_argument("--speed", type=float, default=1.0, help="1 = real time, 0 = flat out")
    parser.add_argument("--chunk-ms", type=int, default=100)
    parser.add_argument("--language", default="auto")
    parser.add_argument("--itn", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--format", choices=FORMATS, default="text")
    parser.add_argument("--out", default=None, help="file (one input) or directory")
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args(argv)
    if args.speed < 0 or args.chunk_ms <= 0 or args.concurrency < 1:
        parser.error("--speed must be >= 0, --chunk-ms and --concurrency positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results = asyncio.run(stream_all(args))
    write_outputs(results, args)
    failed = 0
    for r in results:
        for e in r.errors:
            print(f"{r.file}: error [{e.get('code')}]: {e.get('message')}", file=sys.stderr)
        if r.errors or not r.ended:
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
