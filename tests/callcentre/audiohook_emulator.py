"""A Genesys AudioHook client for tests: one call over a real WebSocket, as Genesys plays it.

It opens with the AudioHook headers (`X-API-KEY` when given), offers stereo PCMU at 8 kHz
(and each channel alone), waits for `opened`, streams the call's interleaved μ-law frames
at the call's pace (times `speed`), sends a `ping` when the call reaches `ping_at_s` and
any other `messages` where they fall, pauses once if asked (no audio for the pause: live
audio is lost, so `resumed` reports it `discarded` and the position jumps by it, as
Genesys's own live client does; or, as Genesys' reference test client does, the audio
waits and goes on where it paused, `discarded` zero), then sends `close` and waits for
`closed` before closing the socket. Every server message is kept;
what breaks AudioHook's rules on the server's side (a seq that does not count up by one, a
pong for another ping, a binary frame) is listed in `problems`, never raised mid-call.

With the server's default limits (audio at most twice real time, a 5 s burst) `speed`
may be up to 2.

`play_reconnecting` also takes the server's `reconnect`: it opens a new session naming
the one asked to move (`continuedSessions`), closes that one (`close`, reason `reconnect`,
answered by `closed` after its owed transcripts), and streams the rest of the call on the
new one, whose positions count from zero: one `Leg` per session.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.callcentre.rfc9421 import sign_hmac_sha256

RATE = 8000


@dataclass(frozen=True)
class Pause:
    """A pause of the call's audio: from `at_s` (call time) for `seconds`.

    `lost`: the call's audio of the pause is dropped (a live call); else it waits and the
    call goes on where it paused. `paused` is sent `times` times (Genesys' test client
    sends it twice).
    """

    at_s: float
    seconds: float
    lost: bool = True
    times: int = 1


@dataclass(frozen=True)
class TimedMessage:
    """A client message sent once the call's audio reaches `at_s` (`update`, `discarded`)."""

    at_s: float
    type: str
    parameters: dict[str, Any] = field(default_factory=dict)


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
    messages: tuple[TimedMessage, ...] = ()
    language: str = "en-US"
    api_key: str | None = None
    # Genesys signs the handshake (RFC 9421) when the integration has a client secret.
    client_secret: bytes | None = None
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

    def __init__(
        self, ws: ClientConnection, call: AudioHookCall, run: AudioHookRun, base: int = 0
    ) -> None:
        self.ws = ws
        self.call = call
        self.run = run
        self.seq = 0
        self.position = 0  # samples per channel: sent, and discarded by the pause
        self.base = base  # samples of the call that earlier sessions carried
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

    @property
    def asked_to_reconnect(self) -> bool:
        return bool(self.run.of("reconnect"))


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


def _headers(call: AudioHookCall, url: str) -> dict[str, str]:
    headers = {
        "Audiohook-Organization-Id": call.organization_id,
        "Audiohook-Correlation-Id": str(uuid.uuid4()),
        "Audiohook-Session-Id": call.session_id,
    }
    if call.api_key is not None:
        headers["X-API-KEY"] = call.api_key
    if call.client_secret is not None and call.api_key is not None:
        headers |= genesys_signature(url, headers, call.api_key, call.client_secret)
    return headers


def genesys_signature(
    url: str, headers: dict[str, str], api_key: str, secret: bytes, now: float | None = None
) -> dict[str, str]:
    """The signature fields Genesys adds to an AudioHook handshake (its reference client's
    components and parameters: 30 s of life, a random nonce)."""
    parts = urlsplit(url)
    created = int(time.time() if now is None else now)
    # RFC 9110 §4.2.3: the authority without its scheme's default port, lower case.
    default = {"ws": 80, "http": 80, "wss": 443, "https": 443}.get(parts.scheme)
    authority = (parts.hostname or "").lower()
    if parts.port is not None and parts.port != default:
        authority += f":{parts.port}"
    components = {
        "@request-target": (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
        "@authority": authority,
        "audiohook-organization-id": headers["Audiohook-Organization-Id"],
        "audiohook-session-id": headers["Audiohook-Session-Id"],
        "audiohook-correlation-id": headers["Audiohook-Correlation-Id"],
        "x-api-key": api_key,
    }
    params: dict[str, str | int] = {
        "keyid": api_key,
        "nonce": base64.b64encode(secrets.token_bytes(18)).decode(),
        "alg": "hmac-sha256",
        "created": created,
        "expires": created + 30,
    }
    return sign_hmac_sha256(secret, components, params)


async def _stream(client: _Client, call: AudioHookCall) -> None:
    """The call's frames at its pace, with the ping and the pause where they fall."""
    loop = asyncio.get_running_loop()
    width = len(call.channels)
    total = len(call.audio) // width - client.base
    frame = call.frame_ms * RATE // 1000
    ping_at = None if call.ping_at_s is None else int(call.ping_at_s * RATE)
    pause_at = None if call.pause is None else int(call.pause.at_s * RATE)
    due = sorted(call.messages, key=lambda m: m.at_s)
    t0 = loop.time()
    while client.position < total and not (client.stopped() or client.asked_to_reconnect):
        if ping_at is not None and client.position >= ping_at:
            ping_at = None
            await client.send("ping")
        while due and client.position >= int(due[0].at_s * RATE):
            message = due.pop(0)
            await client.send(message.type, **message.parameters)
        if pause_at is not None and call.pause is not None and client.position >= pause_at:
            pause_at = None
            t0 = await _pause(client, call.pause, t0)
            continue
        end = min(client.position + frame, total)
        cuts = [int(m.at_s * RATE) for m in due] + ([pause_at] if pause_at is not None else [])
        end = min([end, *(c for c in cuts if c > client.position)])  # they cut this frame
        await asyncio.sleep(max(0.0, t0 + client.position / RATE / call.speed - loop.time()))
        first, last = client.base + client.position, client.base + end
        await client.ws.send(call.audio[first * width : last * width])
        client.position = end


async def _pause(client: _Client, pause: Pause, t0: float) -> float:
    """No audio for the pause; its call audio is lost, as a live call's would be, or
    waits. Returns the pace's new start time."""
    loop = asyncio.get_running_loop()
    start = client.position
    for _ in range(pause.times):
        await client.send("paused")
    dropped = int(pause.seconds * RATE)
    end = start + dropped
    await asyncio.sleep(max(0.0, t0 + end / RATE / client.call.speed - loop.time()))
    if not pause.lost:
        await client.send("resumed", start=duration(start), discarded=duration(0))
        return t0 + pause.seconds / client.call.speed  # the audio goes on where it paused
    client.position = end
    await client.send("resumed", start=duration(start), discarded=duration(dropped))
    return t0


async def play(url: str, call: AudioHookCall) -> AudioHookRun:
    """Play `call` to the AudioHook endpoint at `url`; every server message comes back."""
    run = AudioHookRun()
    async with connect(url, additional_headers=_headers(call, url), max_size=None) as ws:
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


@dataclass
class Leg:
    """One session of a call that reconnects: where in the call's audio it began
    (samples), and what it saw."""

    base: int
    run: AudioHookRun


async def play_reconnecting(url: str, call: AudioHookCall) -> list[Leg]:
    """Play `call`, moving to a new session whenever the server asks (`reconnect`)."""
    total = len(call.audio) // len(call.channels)
    client, reader = await _open_leg(url, call, 0, None)
    legs = [Leg(0, client.run)]
    while True:
        await _stream(client, call)
        done = client.base + client.position
        if not client.asked_to_reconnect or client.stopped() or done >= total:
            break
        # Make before break: the new session is open before the old one is closed.
        following = await _open_leg(url, replace(call, session_id=str(uuid.uuid4())), done, client)
        await _close_leg(client, reader, "reconnect")
        client, reader = following
        legs.append(Leg(done, client.run))
    await _close_leg(client, reader, "end")
    return legs


async def _open_leg(
    url: str, call: AudioHookCall, base: int, continues: _Client | None
) -> tuple[_Client, asyncio.Task[None]]:
    ws = await connect(url, additional_headers=_headers(call, url), max_size=None)
    client = _Client(ws, call, AudioHookRun(), base)
    reader = asyncio.create_task(client.read())
    parameters = _open_parameters(call)
    if continues is not None:
        serverseq = continues.run.messages[-1]["seq"] if continues.run.messages else 0
        earlier = {
            "id": continues.call.session_id,
            "serverseq": serverseq,
            "clientseq": continues.seq,
        }
        parameters["continuedSessions"] = [earlier]
    await client.send("open", **parameters)
    await client.wait_for("opened")
    return client, reader


async def _close_leg(client: _Client, reader: asyncio.Task[None], reason: str) -> None:
    try:
        if not client.stopped():
            await client.send("close", reason=reason)
            await client.wait_for("closed")
        await client.ws.close()
        await reader
    finally:
        reader.cancel()
    client.run.close_code = client.ws.close_code
