"""`sensestream stream` (and scripts/stream_file.py): each file one live stream, captions as
they finish."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from engine.errors import AudioError
from sensestream.client import (
    BYTES_PER_SECOND,
    ClientError,
    Event,
    Outcome,
    RefusedError,
    SessionOptions,
    bearer,
    converse,
    pace_for,
)
from sensestream.resuming import resumable_session
from sensestream.stream.audio import ChannelCountError, load_frames
from sensestream.stream.live import CLEAR_LINE, LiveView
from sensestream.stream.output import (
    FORMATS,
    OutputPlan,
    StreamResult,
    plan_output,
    render,
    report,
    same_terminal,
    save,
)

DESCRIPTION = "Replay audio files to a SenseStream server as live streams; print or save captions."
API_KEY_ENV = "SENSESTREAM_API_KEY"


def explain(exc: ClientError, api_key: str | None) -> str:
    """The error's line; a refusal about the key also says how to pass one."""
    if not (isinstance(exc, RefusedError) and exc.about_key):
        return str(exc)
    if api_key is None:
        return f"{exc}; pass --api-key KEY or set {API_KEY_ENV}"
    return f"{exc}; the key given was refused: pass another with --api-key KEY or set {API_KEY_ENV}"


def unreadable(path: Path) -> tuple[str, str] | None:
    """Why `path` cannot be opened, in words libsndfile does not find ("System error")."""
    if not path.exists():
        return "not_found", "no such file"
    if path.is_dir():
        return "not_a_file", "is a directory"
    if not os.access(path, os.R_OK):
        return "permission_denied", "permission denied"
    return None


def session_options(args: argparse.Namespace, channels: int = 1) -> SessionOptions:
    start = {"type": "start", "language": args.language, "itn": args.itn}
    if args.multichannel:
        start.update(channels=channels, multichannel=True)
        if args.channel_labels:
            start["channel_labels"] = list(args.channel_labels)
    if args.stream_id:
        start["stream_id"] = args.stream_id
    if args.diarize:
        start["diarize"] = True
        if args.max_speakers:
            start["max_speakers"] = args.max_speakers
    return SessionOptions(
        start={**start, "pace": pace_for(args.speed)},
        frame_s=args.chunk_ms / 1000,
        speed=args.speed,
        headers=bearer(args.api_key),
    )


async def stream_one(path: Path, args: argparse.Namespace, live: LiveView | None) -> StreamResult:
    """One file as one session; every failure becomes an error on its result."""
    result = StreamResult(path)
    problem = unreadable(path)
    if problem is not None:
        return result.fail(*problem)
    try:
        frames, channels = load_frames(path, args.chunk_ms, args.multichannel, args.channel_labels)
    except (AudioError, ChannelCountError) as exc:
        return result.fail(exc.code, str(exc))
    outcome, failure = Outcome(), None
    show = live.show if live is not None else None
    options = session_options(args, channels)
    try:
        if args.resume:
            outcome = await resumed_session(args.url, (frames, channels), options, result, show)
        else:
            await converse(args.url, frames, options, outcome, show)
    except ClientError as exc:
        failure = exc
    finally:
        if live is not None:
            live.clear()
    result.absorb(outcome)
    if failure is not None:
        result.fail(failure.code, explain(failure, args.api_key))
    if not result.ended and not result.errors:
        code = result.close_code
        result.fail("incomplete", f"the server closed the stream before `end` (code {code})")
    return result


async def resumed_session(
    url: str,
    audio: tuple[Sequence[bytes], int],
    options: SessionOptions,
    result: StreamResult,
    show: Callable[[Event], None] | None,
) -> Outcome:
    """`--resume`: one stream (its s16le frames at 16 kHz and their channel count) that
    reconnects and resumes after each drop; each gap is noted on the result."""
    frames, channels = audio
    seen = await resumable_session(
        url,
        b"".join(frames),
        start=options.start,
        chunk=len(frames[0]) if frames else 3200,
        speed=options.speed,
        headers=options.headers,
        on_event=show,
        bytes_per_frame=2 * channels,
        bytes_per_second=BYTES_PER_SECOND * channels,
    )
    result.gaps = [round(back - gone, 3) for gone, back in seen.gaps]
    return Outcome(events=seen.events, times=seen.times)


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


def labels(text: str) -> tuple[str, ...]:
    """--channel-labels: comma-separated names, none empty, none twice."""
    names = tuple(name.strip() for name in text.split(","))
    if not all(names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"give distinct, non-empty names: {text!r}")
    return names


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
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
    parser.add_argument(
        "--stream-id",
        default=None,
        help="name the stream, so that others can follow it at /v1/streams/ID/events",
    )
    parser.add_argument(
        "--multichannel",
        action="store_true",
        help="recognise each channel of a stereo file on its own (default: mix to mono)",
    )
    parser.add_argument(
        "--channel-labels",
        type=labels,
        default=(),
        metavar="A,B",
        help="names of the channels with --multichannel, one each (default: 0,1)",
    )
    parser.add_argument(
        "--diarize", action="store_true", help="label who spoke: each caption names its speaker"
    )
    parser.add_argument(
        "--max-speakers", type=int, default=None, metavar="N", help="with --diarize: at most N"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="after a dropped connection, reconnect with back-off and resume the stream "
        "(the server needs --resume-grace-s)",
    )
    args = parser.parse_args(argv)
    if args.max_speakers is not None and (not args.diarize or args.max_speakers < 1):
        parser.error("--max-speakers needs --diarize and a count of 1 or more")
    if args.speed < 0 or args.chunk_ms <= 0 or args.concurrency < 1:
        parser.error("--speed must be >= 0, --chunk-ms and --concurrency positive")
    if args.channel_labels and not args.multichannel:
        parser.error("--channel-labels needs --multichannel")
    if args.stream_id and len(args.files) > 1:
        parser.error("--stream-id names one stream: give one file")
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
