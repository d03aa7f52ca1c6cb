"""The protocol-v1 client: one WebSocket session, paced audio, every event and when it came.

`converse` is the core every caller shares (the benchmark, the soak, stream_file.py and
the tests); `run_session` is its short form for raw s16le bytes. A session that cannot
run (a refused handshake, a bad URL, no server, no `end` in time) raises a `ClientError`
with a stable code; what the server said before that stays in the `Outcome`. A server that
answers in FunASR's or OpenAI's protocol (the URL names another of its paths) ends the
session at its first such message with a `WrongEndpointError` naming the `/ws` URL.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import (
    ConnectionClosed,
    InvalidHandshake,
    InvalidStatus,
    InvalidURI,
    WebSocketException,
)
from websockets.uri import parse_uri

SAMPLE_RATE = 16000
BYTES_PER_SECOND = 2 * SAMPLE_RATE  # pcm_s16le, mono
# The server holds a live stream to about real time (2x with a burst), so anything faster
# has to announce itself as a replay.
LIVE_SPEED_LIMIT = 1.5
OPEN_TIMEOUT_S = 10.0
MAX_MESSAGE_BYTES = 1 << 22
REFUSALS = {401: "unauthorized", 403: "forbidden", 503: "unavailable"}
STOP = json.dumps({"type": "stop"})
V1_PATH = "/ws"
FUNASR = "FunASR's protocol"
OPENAI_REALTIME = "OpenAI's Realtime protocol"

Event = dict[str, Any]


class ClientError(Exception):
    """A session that could not run, with a stable code and one line for a person."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class RefusedError(ClientError):
    """The server answered the handshake with an HTTP status instead of a WebSocket."""

    def __init__(self, status: int, reason: str) -> None:
        code = REFUSALS.get(status, f"http_{status}")
        super().__init__(code, f"server refused the connection: {status} {reason}")
        self.status = status
        self.reason = reason

    @property
    def about_key(self) -> bool:
        """Whether the refusal is about the API key (a 401, or a 403 whose reason names a key)."""
        return self.status == 401 or (self.status == 403 and "key" in self.reason.lower())


class WrongEndpointError(ClientError):
    """The server answered in another protocol it speaks: the URL names the wrong path."""

    def __init__(self, protocol: str, url: str) -> None:
        self.protocol = protocol
        self.suggested_url = v1_url(url)
        super().__init__("wrong_endpoint", f"this URL speaks {protocol}: use {self.suggested_url}")


@dataclass(frozen=True, slots=True)
class SessionOptions:
    """How one session runs."""

    start: Mapping[str, Any] | None = None  # the `start` message; None sends none
    frame_s: float = 0.1  # audio in each frame, for pacing
    speed: float = 0.0  # times real time; 0 sends as fast as the socket takes it
    stop: bool = True  # send `stop` after the audio
    extra: tuple[bytes | str, ...] = ()  # sent after the audio, before `stop`
    headers: Mapping[str, str] | None = None
    open_timeout_s: float = OPEN_TIMEOUT_S
    drain_timeout_s: float | None = None  # after the audio, for the server to close
    keepalive: bool = True  # False: no pings, so a busy server is never dropped for pongs
    ssl_context: ssl.SSLContext | None = None  # for wss://, e.g. trusting a test certificate


@dataclass
class Outcome:
    """What one session saw, filled in while it runs (times are time.monotonic())."""

    events: list[Event] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # arrival of each event
    close_code: int | None = None
    started_at: float = 0.0  # when the first frame was due: the pacing origin
    sent_at: list[float] = field(default_factory=list)  # when each frame went out
    audio_done_at: float = 0.0
    malformed: list[str] = field(default_factory=list)  # messages that were not events

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e["type"] == kind]

    def timed(self, kind: str) -> list[tuple[Event, float]]:
        """Events of one kind with their arrival times."""
        return [(e, t) for e, t in zip(self.events, self.times, strict=True) if e["type"] == kind]

    @property
    def ended(self) -> bool:
        return any(e["type"] == "end" for e in self.events)


def pcm16(audio: np.ndarray) -> bytes:
    """float32 in [-1, 1] as little-endian int16 bytes (pcm_s16le)."""
    return bytes((np.clip(audio, -1.0, 32767 / 32768) * 32768).astype("<i2").tobytes())


def multichannel_start(
    stream_id: str, labels: Sequence[str], sample_rate: int = 8000, encoding: str = "mulaw"
) -> dict[str, Any]:
    """A v1 `start` for a call recognised channel by channel, named `stream_id`."""
    return {
        "type": "start",
        "sample_rate": sample_rate,
        "encoding": encoding,
        "channels": len(labels),
        "multichannel": True,
        "channel_labels": list(labels),
        "stream_id": stream_id,
    }


def split(data: bytes, size: int) -> list[bytes]:
    """`data` in frames of `size` bytes (the last one shorter)."""
    return [data[i : i + size] for i in range(0, len(data), size)]


def pace_for(speed: float) -> str:
    """The start message's `pace` for a stream sent at `speed` times real time."""
    return "live" if 0 < speed <= LIVE_SPEED_LIMIT else "replay"


def bearer(api_key: str | None) -> dict[str, str]:
    """The Authorization header for an API key (none without one)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def refusal(exc: InvalidStatus) -> RefusedError:
    """A refused handshake: the HTTP status and the first line of the server's reason."""
    body = bytes(exc.response.body or b"").decode("utf-8", "replace").strip()
    reason = body.splitlines()[0][:200] if body else exc.response.reason_phrase
    return RefusedError(exc.response.status_code, reason)


def client_error(exc: BaseException, open_timeout_s: float = OPEN_TIMEOUT_S) -> ClientError:
    """Any failure to open or keep a session, as a typed error."""
    if isinstance(exc, ClientError):
        return exc
    if isinstance(exc, InvalidStatus):
        return refusal(exc)
    if isinstance(exc, InvalidURI):
        return ClientError("bad_url", str(exc))
    if isinstance(exc, InvalidHandshake):
        return ClientError("handshake", f"handshake failed: {exc}")
    if isinstance(exc, ConnectionClosed):
        return ClientError("connection", f"connection lost: {exc}")
    if isinstance(exc, TimeoutError):
        return ClientError("timeout", f"no answer from the server within {open_timeout_s:g} s")
    if isinstance(exc, OSError):
        return ClientError("connection", exc.strerror or str(exc) or type(exc).__name__)
    return ClientError("websocket", str(exc) or type(exc).__name__)


def v1_url(url: str) -> str:
    """`url` with the v1 path: same scheme, host and port, and no query (it may hold a key)."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, V1_PATH, "", ""))


def foreign_protocol(message: object) -> str | None:
    """Which other protocol a decoded server message is in (FunASR's, OpenAI's Realtime), if any.

    Every v1 event carries `v`; neither of the others does. FunASR's results have `mode` and
    `is_final`/`wav_name` but no `type`; OpenAI's events have dotted types
    (`session.created`), an `event_id`, or an `error` that is an object.
    """
    if not isinstance(message, dict) or "v" in message:
        return None
    kind = message.get("type")
    if kind is None and "mode" in message and ("is_final" in message or "wav_name" in message):
        return FUNASR
    if isinstance(kind, str) and (
        "." in kind or "event_id" in message or isinstance(message.get("error"), dict)
    ):
        return OPENAI_REALTIME
    return None


def check_url(url: str) -> None:
    """Raise ClientError("bad_url") for anything but a ws:// or wss:// URL."""
    try:
        parse_uri(url)
    except InvalidURI as exc:
        raise ClientError("bad_url", str(exc)) from exc
    except ValueError as exc:  # urllib's complaint, e.g. about a broken IPv6 address
        raise ClientError("bad_url", f"{url} isn't a valid URI: {exc}") from exc


async def converse(
    url: str,
    frames: Sequence[bytes],
    options: SessionOptions,
    outcome: Outcome | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> Outcome:
    """Connect, start, send `frames` paced to `options.speed`, stop, and read every event
    until the server closes. `on_event` sees each event as it arrives."""
    seen = outcome if outcome is not None else Outcome()
    check_url(url)
    try:
        async with connect(
            url,
            additional_headers=dict(options.headers or {}),
            compression=None,  # PCM does not deflate
            max_size=MAX_MESSAGE_BYTES,
            open_timeout=options.open_timeout_s,
            ping_interval=20 if options.keepalive else None,
            ssl=options.ssl_context,
        ) as ws:
            await _exchange(ws, url, frames, options, seen, on_event=on_event)
    except (WebSocketException, OSError, TimeoutError) as exc:
        raise client_error(exc, options.open_timeout_s) from exc
    return seen


async def _exchange(
    ws: ClientConnection,
    url: str,
    frames: Sequence[bytes],
    options: SessionOptions,
    outcome: Outcome,
    *,
    on_event: Callable[[Event], None] | None,
) -> None:
    # Reading starts first: a server that refuses the session (server_full) sends its
    # error and closes at once, maybe before our `start` has gone out.
    receiver = asyncio.create_task(_receive(ws, url, outcome, on_event))
    sender = asyncio.create_task(_send_all(ws, frames, options, outcome))
    try:
        # Sending stops as soon as reading fails: a server of another protocol is no use.
        done, _ = await asyncio.wait((receiver, sender), return_when=asyncio.FIRST_COMPLETED)
        if receiver in done:
            receiver.result()  # raises what ended the reading, if anything did
        await sender
        await asyncio.wait_for(asyncio.shield(receiver), options.drain_timeout_s)
    except TimeoutError:
        after = options.drain_timeout_s
        raise ClientError("timeout", f"no close within {after:g} s of the audio's end") from None
    except WrongEndpointError:
        # No closing handshake: such a server may leave it unread behind the audio sent.
        ws.transport.abort()
        raise
    finally:
        receiver.cancel()
        sender.cancel()
        outcome.close_code = ws.close_code


async def _send_all(
    ws: ClientConnection, frames: Sequence[bytes], options: SessionOptions, outcome: Outcome
) -> None:
    try:
        if options.start is not None:
            await ws.send(json.dumps(dict(options.start)))
        await _send(ws, frames, options, outcome)
    except ConnectionClosed:
        pass  # the server closed first; the receiver has its last word and the code


async def _send(
    ws: ClientConnection, frames: Sequence[bytes], options: SessionOptions, outcome: Outcome
) -> None:
    clock = time.monotonic
    outcome.started_at = t0 = clock()
    step = options.frame_s / options.speed if options.speed > 0 else 0.0
    for i, frame in enumerate(frames):
        if step:
            # Due times from the start, not from the previous send: lateness never adds up.
            await asyncio.sleep(max(0.0, t0 + i * step - clock()))
        await ws.send(frame)
        outcome.sent_at.append(clock())
    for message in options.extra:
        await ws.send(message)
    outcome.audio_done_at = clock()
    if options.stop:
        await ws.send(STOP)


async def _receive(
    ws: ClientConnection, url: str, outcome: Outcome, on_event: Callable[[Event], None] | None
) -> None:
    try:
        async for message in ws:
            now = time.monotonic()
            event = _parse(message, url)
            if event is None:
                outcome.malformed.append(str(message)[:80])
                continue
            outcome.events.append(event)
            outcome.times.append(now)
            if on_event is not None:
                on_event(event)
    except ConnectionClosed:
        pass  # an error close is still the end of the session; its code is kept


def _parse(message: str | bytes, url: str) -> Event | None:
    """A v1 event, or None; raises WrongEndpointError for another protocol's message."""
    try:
        event = json.loads(message)
    except ValueError:
        return None
    protocol = foreign_protocol(event)
    if protocol is not None:
        raise WrongEndpointError(protocol, url)
    return event if isinstance(event, dict) and isinstance(event.get("type"), str) else None


async def run_session(
    url: str,
    audio: bytes,
    *,
    start: dict[str, Any] | None = None,
    chunk: int = 3200,
    speed: float = 0.0,
    stop: bool = True,
    extra: list[bytes | str] | None = None,
    headers: dict[str, str] | None = None,
    pace: str | None = "auto",
    linger: float = 120.0,
    ssl_context: ssl.SSLContext | None = None,
) -> Outcome:
    """Stream s16le `audio` in `chunk`-byte frames at `speed` x real time and collect every
    event. With `pace="auto"` a faster-than-real-time stream announces itself as a replay.
    `linger` bounds the whole session."""
    if pace == "auto" and pace_for(speed) == "replay":
        start = {**(start or {"type": "start"}), "pace": "replay"}
    options = SessionOptions(
        start=start,
        frame_s=chunk / BYTES_PER_SECOND,
        speed=speed,
        stop=stop,
        extra=tuple(extra or ()),
        headers=headers,
        ssl_context=ssl_context,
    )
    return await asyncio.wait_for(converse(url, split(audio, chunk), options), linger)
