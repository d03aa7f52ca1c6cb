"""A Genesys AudioHook client for tests: one call over a real WebSocket, as Genesys plays it.

It opens with the AudioHook headers (`X-API-KEY` when given), offers stereo PCMU at 8 kHz
(and each channel alone), waits for `opened`, streams the call's interleaved μ-law frames
at the call's pace (times `speed`), sends a `ping` when the call reaches `ping_at_s`,
pauses once if asked (no audio for the pause: live audio is lost, so `resumed` reports it
`discarded` and the position jumps by it, as Genesys's own live client does), then sends
`close` and waits for `closed` before closing the socket. Every server message is kept;
what breaks AudioHook's rules on the server's side (a seq that does not count up by one, a
pong for another ping, a binary frame) is listed in `problems`, never raised mid-call.

With the server's default limits (audio at most twice real time, a 5 s burst) `speed`
may be up to 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

RATE = 8000


@dataclass(frozen=True)
class Pause:
    """A pause of the call's audio: from `at_s` (call time) for `seconds`."""

    at_s: float
    seconds: float


@dataclass(frozen=True)
class AudioHookCall:
    """What to play: interleaved μ-law at 8 kHz, one channel per name in `channels`."""

    audio: bytes
    conversation_id: str
    channels: tuple[str, ...] = ("external", "internal")
    frame_ms: int = 100
    speed: float = 1.0
    ping_at_s: float | None = None
    pause: Pause | None = None
    language: str = "en-US"
    api_key: str | None = None
    session_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    organization_id: str = "d7934305-0972-4844-938e-9060eef73d05"
    reply_timeout_s: float = 30.0


@dataclass
class AudioHookRun:
    """What one call saw: every server message in order, and how the socket closed."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    sent: list[dict[str, Any]] = field(default_factory=list)  # the client's text messages
    problems: list[str] = field(default_factory=list)
    close_code: int | None = None

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("type") == kind]

    def transcripts(self) -> list[dict[str, Any]]:
        """The `data` of every transcript entity, in arrival order."""
        return [
            entity["data"]
            for message in self.of("event")
            for entity in message["parameters"]["entities"]
            if entity.get("type") == "transcript"
        ]

    @property
    def closed(self) -> bool:
        return bool(self.of("closed"))


def duration(samples: int) -> str:
    return f"PT{samples / RATE:.3f}S"


class _Client:
    """One session's client state: seq counters, position, and the server's messages."""

    def __init__(self, ws: ClientConnection, call: AudioHookCall, run: AudioHookRun) -> None:
        self.ws = ws
        self.call = call
        self.run = run
        self.seq = 0
        self.position = 0  # samples per channel: sent, and discarded by the pause
        self._arrived = asyncio.Event()

    async def send(self, kind: str, **parameters: Any) -> int:
        self.seq += 1
        serverseq = self.run.messages[-1]["seq"] if self.run.messages else 0
        message = {
            "version": "2",
            "id": self.call.session_id,
            "type": kind,
            "seq": self.seq,
            "serverseq": serverseq,
            "position": duration(self.position),
            "parameters": parameters,
        }
        self.run.sent.append(message)
        await self.ws.send(json.dumps(message))
        return self.seq

    async def read(self) -> None:
        """Keep every server message, checking its seq; ends when the socket closes."""
        with contextlib.suppress(ConnectionClosed):
            async for frame in self.ws:
                if isinstance(frame, bytes):
                    self.run.problems.append(f"binary frame of {len(frame)} bytes")
                    continue
                message = json.loads(frame)
                expected = len(self.run.messages) + 1
                if message.get("seq") != expected:
                    self.run.problems.append(f"server seq {message.get('seq')} != {expected}")
                self.run.messages.append(message)
                self._arrived.set()
        self._arrived.set()

    async def wait_for(self, kind: str) -> dict[str, Any] | None:
        """The first server message of `kind` (None: a disconnect or close came first)."""
        async with asyncio.timeout(self.call.reply_timeout_s):
            while True:
                found = self.run.of(kind)
                if found:
                    return found[0]
                if self.run.of("disconnect") or self.ws.close_code is not None:
                    return None
                self._arrived.clear()
                await self._arrived.wait()

    def stopped(self) -> bool:
        """The server said disconnect, or the socket is gone: the call stops streaming."""
        return bool(self.run.of("disconnect")) or self.ws.close_code is not None


def _open_parameters(call: AudioHookCall) -> dict[str, Any]:
    offers = [call.channels]
    if len(call.channels) > 1:  # each side alone too, as Genesys offers them
        offers += [(name,) for name in call.channels]
    return {
        "organizationId": call.organization_id,
        "conversationId": call.conversation_id,
        "participant": {
            "id": str(uuid.uuid4()),
            "ani": "+1-555-555-1234",
            "aniName": "Test Caller",
            "dnis": "+1-800-555-6789",
        },
        "media": [
            {"type": "audio", "format": "PCMU", "channels": list(c), "rate": RATE} for c in offers
        ],
        "language": call.language,
    }


def _headers(call: AudioHookCall) -> dict[str, str]:
    headers = {
        "Audiohook-Organization-Id": call.organization_id,
        "Audiohook-Correlation-Id": str(uuid.uuid4()),
        "Audiohook-Session-Id": call.session_id,
    }
    if call.api_key is not None:
        headers["X-API-KEY"] = call.api_key
    return headers


async def _stream(client: _Client, call: AudioHookCall) -> None:
    """The call's frames at its pace, with the ping and the pause where they fall."""
    loop = asyncio.get_running_loop()
    width = len(call.channels)
    total = len(call.audio) // width
    frame = call.frame_ms * RATE // 1000
    ping_at = None if call.ping_at_s is None else int(call.ping_at_s * RATE)
    pause_at = None if call.pause is None else int(call.pause.at_s * RATE)
    t0 = loop.time()
    while client.position < total and not client.stopped():
        if ping_at is not None and client.position >= ping_at:
            ping_at = None
            await client.send("ping")
        if pause_at is not None and call.pause is not None and client.position >= pause_at:
            pause_at = None
            await _pause(client, call.pause, t0)
            continue
        end = min(client.position + frame, total)
        if pause_at is not None and client.position < pause_at < end:
            end = pause_at  # the pause cuts this frame
        await asyncio.sleep(max(0.0, t0 + client.position / RATE / call.speed - loop.time()))
        await client.ws.send(call.audio[client.position * width : end * width])
        client.position = end


async def _pause(client: _Client, pause: Pause, t0: float) -> None:
    """No audio for the pause; its call audio is lost, as a live call's would be."""
    loop = asyncio.get_running_loop()
    start = client.position
    await client.send("paused")
    dropped = int(pause.seconds * RATE)
    end = start + dropped
    await asyncio.sleep(max(0.0, t0 + end / RATE / client.call.speed - loop.time()))
    client.position = end
    await client.send("resumed", start=duration(start), discarded=duration(dropped))


async def play(url: str, call: AudioHookCall) -> AudioHookRun:
    """Play `call` to the AudioHook endpoint at `url`; every server message comes back."""
    run = AudioHookRun()
    async with connect(url, additional_headers=_headers(call), max_size=None) as ws:
        client = _Client(ws, call, run)
        reader = asyncio.create_task(client.read())
        try:
            await client.send("open", **_open_parameters(call))
            if await client.wait_for("opened") is not None:
                await _stream(client, call)
            if not client.stopped():
                await client.send("close", reason="end")
                await client.wait_for("closed")
            await ws.close()
            await reader
        finally:
            reader.cancel()
        run.close_code = ws.close_code
    _check_pongs(run)
    return run


def _check_pongs(run: AudioHookRun) -> None:
    """Each ping got its pong, whose clientseq is that ping's seq."""
    pings = [m["seq"] for m in run.sent if m["type"] == "ping"]
    pongs = [m["clientseq"] for m in run.of("pong")]
    if pongs != pings and not run.of("disconnect"):
        run.problems.append(f"pongs answer client seqs {pongs}; the pings were {pings}")
