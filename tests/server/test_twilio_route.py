"""/twilio on a real server in this process: Twilio's stream is taken, keyed and signed.

In this process, so the test can count the audio the session's VAD sees: a refused
stream must be refused before any of its audio is decoded.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

import server.app
from server.app import App
from tests.callcentre.twilio_emulator import (
    Played,
    TwilioCall,
    connected_message,
    media_messages,
    play_call,
    signed_headers,
    start_message,
    stop_message,
)
from tests.server.inprocess import HookedVadModel, serving
from tests.streaming.fakes import tone_bursts
from tools.g711 import encode_mulaw

KEY = "call-centre-api-key-0123"
TOKEN = "twilio-auth-token"
SECONDS = 3.0
TIMEOUT_S = 120.0


def two_party_call(**parameters: str) -> TwilioCall:
    caller = encode_mulaw(tone_bursts([(0.3, 1.2)], SECONDS, rate=8000))
    callee = encode_mulaw(tone_bursts([(1.5, 2.4)], SECONDS, rate=8000))
    return TwilioCall(caller, callee, parameters={"pace": "replay", **parameters})


@asynccontextmanager
async def counting(model: Path, **options: Any) -> AsyncIterator[tuple[str, list[int]]]:
    """A server, its /twilio URL, and the samples its sessions' VADs have seen so far."""
    async with serving(model, **options) as (app, url):
        seen = [0]
        count_vad(app, lambda n: seen.__setitem__(0, seen[0] + n))
        yield url.removesuffix("/ws") + "/twilio", seen


def count_vad(app: App, add: Callable[[int], None]) -> None:
    assert app.vad is not None
    app.vad = HookedVadModel(app.vad, lambda samples: add(samples.size))


async def refused_status(url: str, headers: dict[str, str]) -> int | None:
    try:
        async with connect(url, additional_headers=headers, open_timeout=10):
            return None
    except InvalidStatus as exc:
        return exc.response.status_code


def play(url: str, call: TwilioCall, **options: Any) -> Any:
    return play_call(url, call, speed=math.inf, shuffle_frames=3, seed=1, **options)


def test_a_signed_keyed_call_is_decoded_and_ends_cleanly_and_others_are_refused(
    tiny_model_dir: Path,
) -> None:
    call = two_party_call(api_key=KEY)

    async def scenario() -> tuple[Played, int, Played, int, list[int | None]]:
        async with counting(tiny_model_dir, api_keys=KEY, twilio_auth_token=TOKEN) as (
            url,
            seen,
        ):
            signed = signed_headers(url, TOKEN)
            good = await asyncio.wait_for(play(url, call, headers=signed), TIMEOUT_S)
            decoded = seen[0]
            wrong = two_party_call(api_key="not-the-key-at-all-0123")
            refused = await asyncio.wait_for(play(url, wrong, headers=signed), TIMEOUT_S)
            statuses = [
                await refused_status(url, {}),
                await refused_status(url, signed_headers(url, "another-token")),
                await refused_status(url, signed_headers(url + "/x", TOKEN)),
            ]
            return good, decoded, refused, seen[0] - decoded, statuses

    good, decoded, refused, decoded_after, statuses = asyncio.run(scenario())
    # Both tracks were decoded, whole (16 kHz after resampling), and the server said nothing.
    assert good.close_code == 1000 and not good.closed_early
    assert good.received == []
    assert decoded >= 0.95 * 2 * SECONDS * 16000, decoded
    # A wrong key in customParameters: closed at start, before any audio is decoded.
    assert refused.close_code == 1008 and refused.received == []
    assert decoded_after == 0
    # Missing or wrong X-Twilio-Signature: the handshake is refused.
    assert statuses == [403, 403, 403]


def test_without_a_token_or_keys_an_unsigned_inbound_stream_is_taken(
    tiny_model_dir: Path,
) -> None:
    call = TwilioCall(two_party_call().inbound, None, parameters={"pace": "replay"})

    async def scenario() -> tuple[Played, int]:
        async with counting(tiny_model_dir) as (url, seen):
            played = await asyncio.wait_for(play(url, call), TIMEOUT_S)
            return played, seen[0]

    played, decoded = asyncio.run(scenario())
    assert played.close_code == 1000 and played.received == []
    assert decoded >= 0.95 * SECONDS * 16000, decoded


def test_duplicate_and_late_chunks_are_dropped_and_counted(tiny_model_dir: Path) -> None:
    call = two_party_call()
    messages = media_messages(call)
    messages.insert(12, messages[10])  # a frame sent twice
    late = messages.pop(20)  # a frame that comes 400 ms after its place was played out
    messages.insert(60, late)

    async def scenario() -> tuple[float, float]:
        async with serving(tiny_model_dir) as (app, url):
            async with connect(url.removesuffix("/ws") + "/twilio") as ws:
                await ws.send(json.dumps(connected_message()))
                await ws.send(json.dumps(start_message(call)))
                (conn,) = app.sessions.values()
                for message in messages:
                    await ws.send(message)
                await ws.send(json.dumps(stop_message(call, len(messages) + 2)))
                await ws.wait_closed()
            await asyncio.wait_for(conn._done.wait(), TIMEOUT_S)
            dropped = app.metrics.media_dropped
            return (
                dropped.labels("duplicate")._value.get(),
                dropped.labels("late")._value.get(),
            )

    assert asyncio.run(scenario()) == (1.0, 1.0)


def test_a_peer_that_never_sends_start_is_closed_at_the_start_deadline(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An unkeyed peer may not hold a session slot: its `start` (and key) must come soon.
    monkeypatch.setattr(server.app, "START_DEADLINE_S", 0.5)

    async def scenario() -> tuple[int | None, float, int]:
        async with serving(tiny_model_dir, api_keys=KEY) as (app, url):
            loop = asyncio.get_running_loop()
            async with connect(url.removesuffix("/ws") + "/twilio") as ws:
                await ws.send(json.dumps(connected_message()))
                opened = loop.time()
                await asyncio.wait_for(ws.wait_closed(), TIMEOUT_S)
                return ws.close_code, loop.time() - opened, len(app.sessions)

    code, waited, left = asyncio.run(scenario())
    assert code == 1008 and waited < 5.0 and left == 0
