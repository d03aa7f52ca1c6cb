"""Twilio's side of a Media Stream, for tests: a call's two tracks as Twilio streams them.

`play_call` opens the WebSocket as Twilio does and sends `connected`, `start` (both
tracks, the call's SID, customParameters), 20 ms `media` frames per track stamped with
their milliseconds since the stream started, `stop`, then waits for the server to close.
The frames go at real pace (or `speed` times it), shuffled by up to a few frames with a
seeded shuffle, as a jittery network delivers them. Twilio reads nothing back on a
`<Start>` stream; what the server says is recorded only to show that it says nothing.
Results are read from a subscriber of the stream (tests/callcentre/subscriber.py).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from streaming.protocols.twilio.signature import twilio_signature

FRAME_MS = 20
FRAME_BYTES = 160  # 20 ms of 8 kHz μ-law
ACCOUNT_SID = "AC" + "0" * 32


@dataclass(frozen=True)
class TwilioCall:
    """What Twilio would stream: each track's mono 8 kHz μ-law, and how it names the call."""

    inbound: bytes
    outbound: bytes | None  # None: an inbound-only stream
    call_sid: str = "CA" + "c0ffee" * 5 + "00"
    parameters: Mapping[str, str] = field(default_factory=dict)

    @property
    def stream_sid(self) -> str:
        return "MZ" + hashlib.sha1(self.call_sid.encode()).hexdigest()[:32]

    @property
    def tracks(self) -> dict[str, bytes]:
        out = {"inbound": self.inbound}
        if self.outbound is not None:
            out["outbound"] = self.outbound
        return out


@dataclass
class Played:
    """What happened on the socket."""

    sent: int = 0  # messages sent
    received: list[str | bytes] = field(default_factory=list)  # what the server sent
    close_code: int | None = None
    close_reason: str = ""
    closed_early: bool = False  # the server closed before the stream was all sent


def signed_headers(url: str, auth_token: str) -> dict[str, str]:
    """The X-Twilio-Signature header Twilio would send for `url` under `auth_token`."""
    return {"X-Twilio-Signature": twilio_signature(auth_token, url)}


def connected_message() -> dict[str, Any]:
    return {"event": "connected", "protocol": "Call", "version": "1.0.0"}


def start_message(call: TwilioCall) -> dict[str, Any]:
    return {
        "event": "start",
        "sequenceNumber": "1",
        "start": {
            "accountSid": ACCOUNT_SID,
            "streamSid": call.stream_sid,
            "callSid": call.call_sid,
            "tracks": list(call.tracks),
            "customParameters": dict(call.parameters),
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
        },
        "streamSid": call.stream_sid,
    }


def media_messages(call: TwilioCall, shuffle_frames: float = 0.0, seed: int = 0) -> list[str]:
    """Every track's 20 ms frames, a frame from each track per 20 ms, each moved by up to
    `shuffle_frames` frames later (seeded). Sequence numbers follow the original order,
    as Twilio numbered them before the network reordered them."""
    rng = random.Random(seed)
    keyed: list[tuple[float, int, dict[str, Any]]] = []
    frames = max(math.ceil(len(d) / FRAME_BYTES) for d in call.tracks.values())
    sequence = 2  # after start's
    for i in range(frames):
        for track, data in call.tracks.items():
            chunk = data[i * FRAME_BYTES : (i + 1) * FRAME_BYTES]
            if not chunk:
                continue
            body = {
                "track": track,
                "chunk": str(i + 1),
                "timestamp": str(i * FRAME_MS),
                "payload": base64.b64encode(chunk).decode("ascii"),
            }
            message = {"event": "media", "sequenceNumber": str(sequence), "media": body}
            keyed.append((i + rng.uniform(0, shuffle_frames), sequence, message))
            sequence += 1
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [_dump({**m, "streamSid": call.stream_sid}) for _, _, m in keyed]


def stop_message(call: TwilioCall, sequence: int) -> dict[str, Any]:
    return {
        "event": "stop",
        "sequenceNumber": str(sequence),
        "stop": {"accountSid": ACCOUNT_SID, "callSid": call.call_sid},
        "streamSid": call.stream_sid,
    }


async def play_call(
    url: str,
    call: TwilioCall,
    *,
    speed: float = 1.0,
    shuffle_frames: float = 3.0,
    seed: int = 0,
    headers: Mapping[str, str] | None = None,
    close_after_stop: bool = False,
    close_timeout_s: float = 60.0,
) -> Played:
    """Stream `call` to `url` as Twilio would (see the module); `speed` math.inf: unpaced.

    `close_after_stop`: close right after `stop` as Twilio itself does, instead of
    waiting for the server to close.
    """
    played = Played()
    async with connect(
        url, additional_headers=dict(headers or {}), compression=None, open_timeout=30
    ) as ws:
        listener = asyncio.create_task(_listen(ws, played))
        try:
            await _send_all(ws, call, played, speed, shuffle_frames, seed)
            if close_after_stop:
                await ws.close()
            await asyncio.wait_for(asyncio.shield(listener), close_timeout_s)
        except ConnectionClosed:
            played.closed_early = True
            await listener
        finally:
            listener.cancel()
        played.close_code, played.close_reason = ws.close_code, ws.close_reason or ""
    return played


async def _send_all(
    ws: ClientConnection,
    call: TwilioCall,
    played: Played,
    speed: float,
    shuffle_frames: float,
    seed: int,
) -> None:
    opening = [connected_message(), start_message(call)]
    for message in opening:
        await _send(ws, _dump(message), played)
    media = media_messages(call, shuffle_frames, seed)
    await _pace(ws, media, len(call.tracks), speed, played)
    await _send(ws, _dump(stop_message(call, len(media) + 2)), played)


async def _pace(
    ws: ClientConnection, media: Sequence[str], tracks: int, speed: float, played: Played
) -> None:
    """One frame per track each 20 ms of call time, at `speed` times real time."""
    loop = asyncio.get_running_loop()
    begin = loop.time()
    for k, message in enumerate(media):
        if math.isfinite(speed):
            due = begin + (k // tracks) * FRAME_MS / 1000 / speed
            await asyncio.sleep(max(0.0, due - loop.time()))
        await _send(ws, message, played)


async def _send(ws: ClientConnection, message: str, played: Played) -> None:
    await ws.send(message)
    played.sent += 1


async def _listen(ws: ClientConnection, played: Played) -> None:
    try:
        async for message in ws:
            played.received.append(message)
    except ConnectionClosed:
        pass


def _dump(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))
