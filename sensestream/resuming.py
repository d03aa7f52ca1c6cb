"""A v1 stream that survives dropped connections: reconnect with back-off and resume.

The server's `ready` gives a resume token, and its `ack`s say how much audio it has
taken. When the connection drops before `end`, `resumable_session` connects again, sends
`start` with `resume` (the token, the last sample acknowledged, the last final received)
and resends the audio from that sample; the server sends `resumed` and every final the
client missed, once. Each drop and its gap are recorded.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from sensestream.client import (
    BYTES_PER_SECOND,
    MAX_MESSAGE_BYTES,
    OPEN_TIMEOUT_S,
    STOP,
    ClientError,
    Event,
    refusal,
)

#: Why a connection ended that another may mend (a refusal or a bad URL will not mend).
DROPPED = (ConnectionClosed, OSError, TimeoutError, InvalidHandshake)


@dataclass
class Resumable:
    """What a resumable session saw: every event in order, across its connections, and
    each gap (when the drop was seen, when the stream was resumed)."""

    events: list[Event] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # each event's arrival (monotonic)
    gaps: list[tuple[float, float]] = field(default_factory=list)
    token: str | None = None
    acked: int = 0  # samples the server has taken, by its last `ack`
    last_utt_id: int | None = None
    # A multichannel stream's: its channel count, and the last final of each channel.
    channels: int = 0
    last_by_channel: dict[int, int] = field(default_factory=dict)
    ended: bool = False
    dropped_at: float | None = None  # when the current gap began
    sent_bytes: int = 0  # the furthest audio sent, over every connection
    # For each resume, when the resent audio reached where the dropped connection had got.
    caught_up: list[float] = field(default_factory=list)
    caught_up_ms: list[float] = field(default_factory=list)  # and where, on the stream clock

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e["type"] == kind]

    def resume(self) -> dict[str, Any]:
        """`start.resume` for the next connection."""
        out: dict[str, Any] = {"token": self.token, "samples": self.acked}
        if self.channels:
            out["last_utt_ids"] = [self.last_by_channel.get(c) for c in range(self.channels)]
        else:
            out["last_utt_id"] = self.last_utt_id
        return out

    def take(self, event: Event) -> None:
        kind = event.get("type")
        if kind in ("ready", "resumed"):
            self.token = event.get("resume_token", self.token)
        if kind == "resumed" and self.dropped_at is not None:
            self.gaps.append((self.dropped_at, time.monotonic()))
            self.dropped_at = None
        if kind == "ack":
            self.acked = int(event["samples"])
        if kind == "ready" and event.get("config", {}).get("multichannel"):
            self.channels = int(event["config"]["channels"])
        if kind == "final":
            self.last_utt_id = int(event["utt_id"])
            if event.get("channel") is not None:
                self.last_by_channel[int(event["channel"])] = int(event["utt_id"])
        if kind == "end":
            self.ended = True
        self.events.append(event)
        self.times.append(time.monotonic())


@dataclass(frozen=True, slots=True)
class _Plan:
    """What the session sends: its start, its audio, in frames of `chunk` bytes, at
    `speed` x real time (0: as fast as the server takes it)."""

    start: Mapping[str, Any] | None
    audio: bytes
    chunk: int
    speed: float
    on_event: Callable[[Event], None] | None = None  # sees each event as it arrives
    bytes_per_frame: int = 2  # of the audio as sent: all its channels' samples
    bytes_per_second: int = BYTES_PER_SECOND  # of the audio as sent, for pacing


async def resumable_session(
    url: str,
    audio: bytes,
    *,
    start: Mapping[str, Any] | None = None,
    chunk: int = 3200,
    speed: float = 0.0,
    headers: Mapping[str, str] | None = None,
    retries: int = 8,
    backoff_s: float = 0.1,
    on_event: Callable[[Event], None] | None = None,
    bytes_per_frame: int = 2,
    bytes_per_second: int = BYTES_PER_SECOND,
) -> Resumable:
    """Stream `audio` (s16le mono at 16 kHz unless `start` says otherwise, with its
    `bytes_per_frame` and `bytes_per_second`) in `chunk`-byte frames at `speed` x real
    time (0: as fast as the server takes it), resuming after each drop, up to `retries`
    in a row."""
    plan = _Plan(start, audio, chunk, speed, on_event, bytes_per_frame, bytes_per_second)
    seen = Resumable()
    failures = 0
    while not seen.ended:
        try:
            async with connect(
                url,
                additional_headers=dict(headers or {}),
                compression=None,
                max_size=MAX_MESSAGE_BYTES,
                open_timeout=OPEN_TIMEOUT_S,
            ) as ws:
                failures = 0
                await _serve(ws, plan, seen)
        except InvalidStatus as exc:
            # A 503 while resuming is a worker or host on its way down (a reload, a
            # restart behind a balancer): the next try finds one that serves.
            if seen.token is None or exc.response.status_code != 503:
                raise refusal(exc) from exc
            failures += 1
            if failures > retries:
                raise refusal(exc) from exc
            await asyncio.sleep(backoff_s * 2 ** min(failures - 1, 6))
        except DROPPED as exc:
            if seen.dropped_at is None:
                seen.dropped_at = time.monotonic()
            failures += 1
            if seen.token is None or failures > retries:
                raise ClientError("dropped", f"the stream could not be resumed: {exc}") from exc
            await asyncio.sleep(backoff_s * 2 ** min(failures - 1, 6))
    return seen


async def _serve(ws: ClientConnection, plan: _Plan, seen: Resumable) -> None:
    """One connection: start (or resume), send the audio from where the server has it,
    read until the server closes; raises ConnectionClosed when it drops first."""
    resuming = seen.token is not None
    if seen.token is None:
        await ws.send(json.dumps(dict(plan.start or {"type": "start"})))
        position = 0
    else:
        await ws.send(json.dumps({"type": "start", "resume": seen.resume()}))
        position = seen.acked * plan.bytes_per_frame
    # A resume sends nothing until `resumed` says whether the stream still wants audio.
    go = asyncio.Event()
    if not resuming:
        go.set()
    sender = asyncio.create_task(
        _send_from(ws, plan, position, go, seen=seen, behind=seen.sent_bytes if resuming else 0)
    )
    try:
        async for message in ws:
            event = json.loads(message)
            seen.take(event)
            if plan.on_event is not None:
                plan.on_event(event)
            if event["type"] == "resumed":
                if event.get("stopped"):
                    sender.cancel()  # it has all the audio and the stop
                go.set()
            if event["type"] == "error" and event.get("code") == "resume_refused":
                raise ClientError("resume_refused", event.get("message", ""))
        if not seen.ended:
            raise ConnectionClosed(None, None)  # closed without `end`: dropped
    finally:
        sender.cancel()


async def _send_from(
    ws: ClientConnection,
    plan: _Plan,
    position: int,
    go: asyncio.Event,
    *,
    seen: Resumable,
    behind: int,
) -> None:
    """Send the audio from `position`, then `stop`; `behind`: where the dropped
    connection had got (0: none), noted in `seen.caught_up` once the resend passes it."""
    await go.wait()
    waiting = behind > 0  # for the resend to reach `behind`
    if waiting and position >= behind:
        seen.caught_up.append(time.monotonic())
        seen.caught_up_ms.append(1000 * position / plan.bytes_per_second)
        waiting = False
    chunk = plan.chunk
    step = chunk / plan.bytes_per_second / plan.speed if plan.speed > 0 else 0.0
    t0 = time.monotonic()
    try:
        for i, offset in enumerate(range(position, len(plan.audio), chunk)):
            if step:
                await asyncio.sleep(max(0.0, t0 + i * step - time.monotonic()))
            await ws.send(plan.audio[offset : offset + chunk])
            end = min(offset + chunk, len(plan.audio))
            if waiting and end >= behind:
                seen.caught_up.append(time.monotonic())
                seen.caught_up_ms.append(1000 * end / plan.bytes_per_second)
                waiting = False
            seen.sent_bytes = max(seen.sent_bytes, end)
        await ws.send(STOP)
    except ConnectionClosed:
        pass  # the reader sees the drop
