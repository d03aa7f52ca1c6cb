"""/audiohook on a real server: a Genesys AudioHook call end to end, and its refusals.

The server runs in this process (the tiny test model, API keys on). A two-party espeak
call is played by the AudioHook emulator (open, ping, a pause, close) while a subscriber
follows its stream by the conversation id: the AudioHook transcripts are the stream's
finals (text, channel, offset), and `closed` comes after every one of them.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.callcentre.audiohook_emulator import (
    AudioHookCall,
    AudioHookRun,
    Pause,
    genesys_signature,
    play,
)
from tests.callcentre.call import Call, make_call
from tests.callcentre.subscriber import Followed, follow
from tests.server.served import served

KEY = "audiohook-test-key-0123456789"
CONVERSATION = "090eaa2f-72fa-480a-83e0-8667ff89c0ec"
SESSION = "7f0c5e2a-3b4d-4c6e-8f10-2a3b4c5d6e7f"
#: The call's channel 0 is the agent (AudioHook's `internal`), channel 1 the customer.
CHANNELS = ("internal", "external")
PAUSE = Pause(at_s=4.0, seconds=1.0)  # cuts the customer's first turn
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def call(tmp_path_factory: pytest.TempPathFactory) -> Call:
    return make_call(tmp_path_factory.mktemp("call"))


def audiohook_url(ws_url: str) -> str:
    return ws_url.removesuffix("/ws") + "/audiohook"


async def call_and_follow(model: Path, call: Call, workers: str) -> tuple[AudioHookRun, Followed]:
    async with served(model, workers, api_keys=KEY) as url:
        follower = asyncio.create_task(
            follow(url, CONVERSATION, {"Authorization": f"Bearer {KEY}"})
        )
        script = AudioHookCall(
            call.stereo(),
            CONVERSATION,
            channels=CHANNELS,
            speed=2.0,
            ping_at_s=1.0,
            pause=PAUSE,
            api_key=KEY,
        )
        run = await play(audiohook_url(url), script)
        return run, await follower


def test_a_call_gets_opened_pong_its_finals_as_transcripts_then_closed(
    tiny_model_dir: Path, call: Call, workers: str
) -> None:
    scenario = call_and_follow(tiny_model_dir, call, workers)
    run, followed = asyncio.run(asyncio.wait_for(scenario, TIMEOUT_S))
    assert run.problems == []
    opened = run.of("opened")[0]["parameters"]
    assert opened["media"] == [
        {"type": "audio", "format": "PCMU", "channels": list(CHANNELS), "rate": 8000}
    ]
    assert len(run.of("pong")) == 1
    assert run.messages[-1]["type"] == "closed" and run.close_code == 1000
    kinds = {m["type"] for m in run.messages}
    assert kinds <= {"opened", "pong", "event", "closed"}, kinds
    # The subscriber follows the stream by its conversation id, channels by name.
    ready = followed.of("ready")[0]["config"]
    assert ready["stream_id"] == CONVERSATION and ready["channel_labels"] == list(CHANNELS)
    finals = [f for f in followed.of("final") if f["text"].strip()]
    assert {f["channel"] for f in finals} == {0, 1}
    # Every final went to Genesys, at its stream time: the pause's gap was filled, so
    # the stream's times are AudioHook's positions.
    got = sorted((t["channelId"], t["offset"], display(t)) for t in run.transcripts())
    want = sorted((f["channel"], seconds(f["start_ms"]), f["text"].strip()) for f in finals)
    assert got == want
    assert all(t["isFinal"] for t in run.transcripts())
    # Nothing was heard in the pause (its audio never reached the server): no utterance
    # lies inside it, and the customer's turn it cut ended where it began (less the few
    # ms the resampler holds back).
    start, end = PAUSE.at_s * 1000, (PAUSE.at_s + PAUSE.seconds) * 1000
    assert not [f for f in finals if start <= f["start_ms"] and f["end_ms"] <= end]
    cut = [f for f in finals if f["channel"] == 1 and f["start_ms"] < start <= f["end_ms"] + 100]
    assert cut and all(start - 100 <= f["end_ms"] <= start for f in cut), finals


def display(transcript: dict[str, Any]) -> str:
    return str(transcript["alternatives"][0]["interpretations"][0]["transcript"])


def seconds(ms: int) -> str:
    whole, frac = divmod(ms, 1000)
    return f"PT{whole}.{frac:03d}".rstrip("0").rstrip(".") + "S"


# ---- refusals and errors ---------------------------------------------------------------


def envelope(kind: str, seq: int, **parameters: Any) -> str:
    message = {
        "version": "2",
        "id": SESSION,
        "type": kind,
        "seq": seq,
        "serverseq": 0 if seq == 1 else 1,
        "position": "PT0S",
        "parameters": parameters,
    }
    return json.dumps(message)


def open_message(*media: dict[str, Any]) -> str:
    offers = media or ({"type": "audio", "format": "PCMU", "channels": ["external"], "rate": 8000},)
    return envelope(
        "open",
        1,
        organizationId="d7934305-0972-4844-938e-9060eef73d05",
        conversationId="1bc3c6a4-6dd6-4d1b-9ad9-55a6d8c1e9d5",
        participant={"id": SESSION, "ani": "", "aniName": "", "dnis": ""},
        media=list(offers),
    )


async def refused(url: str, headers: dict[str, str]) -> int:
    with pytest.raises(InvalidStatus) as info:
        async with connect(url, additional_headers=headers):
            pass
    return info.value.response.status_code


async def until_closed(ws: ClientConnection) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    try:
        async for frame in ws:
            messages.append(json.loads(frame))
    except ConnectionClosed:
        pass
    return messages


Messages = list[dict[str, Any]]


async def session(
    url: str, *frames: str | bytes, wait_opened: bool = False
) -> tuple[Messages, int]:
    """Send `frames` (after `opened` when asked); the server's messages and close code."""
    headers = {"X-API-KEY": KEY, "Audiohook-Session-Id": SESSION}
    async with connect(url, additional_headers=headers) as ws:
        first, *rest = frames
        await ws.send(first)
        opened = [json.loads(await ws.recv())] if wait_opened else []
        assert [m["type"] for m in opened] == ["opened"] * wait_opened
        for frame in rest:
            await ws.send(frame)
        messages = opened + await until_closed(ws)
        assert ws.close_code is not None
        return messages, ws.close_code


async def errors(model: Path, workers: str) -> dict[str, Any]:
    async with served(model, workers, api_keys=KEY) as url:
        ah = audiohook_url(url)
        mono = {"type": "audio", "format": "PCMU", "channels": ["external"], "rate": 16000}
        return {
            "wrong key": await refused(ah, {"X-API-KEY": "not-the-key-0123456789"}),
            "no key": await refused(ah, {}),
            "bad session id": await refused(
                ah, {"X-API-KEY": KEY, "Audiohook-Session-Id": "session-1"}
            ),
            "out of sequence": await session(
                ah, open_message(), envelope("ping", 3), wait_opened=True
            ),
            "audio before open": await session(ah, b"\xff" * 160),
            "unsupported media": await session(ah, open_message(mono)),
        }


def test_refusals_and_errors_end_with_a_disconnect(tiny_model_dir: Path, workers: str) -> None:
    out = asyncio.run(asyncio.wait_for(errors(tiny_model_dir, workers), TIMEOUT_S))
    # A wrong or missing X-API-KEY is refused at the upgrade, as every key header is.
    assert out["wrong key"] == 401 and out["no key"] == 401
    assert out["bad session id"] == 400
    for name, info, close_code in [
        ("out of sequence", "seq 3 is out of sequence", 1002),
        ("audio before open", "audio before open", 1002),
        ("unsupported media", "none of the offered media is supported", 1008),
    ]:
        messages, code = out[name]
        disconnect = messages[-1]
        assert disconnect["type"] == "disconnect", (name, messages)
        assert disconnect["parameters"]["reason"] == "error"
        assert info in disconnect["parameters"]["info"], (name, disconnect)
        assert disconnect["id"] == SESSION and code == close_code, (name, code)
        assert [m["seq"] for m in messages] == list(range(1, len(messages) + 1))


# ---- signed handshakes -----------------------------------------------------------------

SECRET = b"the integration's client secret!"


async def refusal(url: str, headers: dict[str, str]) -> tuple[int, str]:
    with pytest.raises(InvalidStatus) as info:
        async with connect(url, additional_headers=headers):
            pass
    return info.value.response.status_code, info.value.response.body.decode()


async def signed_outcomes(model: Path, workers: str) -> dict[str, Any]:
    secret = base64.b64encode(SECRET).decode()
    async with served(model, workers, api_keys=KEY, audiohook_client_secret=secret) as url:
        ah = audiohook_url(url)
        base = {
            "X-API-KEY": KEY,
            "Audiohook-Session-Id": SESSION,
            "Audiohook-Organization-Id": "d7934305-0972-4844-938e-9060eef73d05",
            "Audiohook-Correlation-Id": "30b0e395-84d3-4570-ac13-9a62d8f514c0",
        }
        signed = base | genesys_signature(ah, base, KEY, SECRET)
        async with connect(ah, additional_headers=signed) as ws:
            await ws.send(open_message())
            opened = json.loads(await ws.recv())
        return {
            "valid": opened["type"],
            "tampered": await refusal(ah, signed | {"Audiohook-Session-Id": CONVERSATION}),
            "missing": await refusal(ah, base),
            "wrong secret": await refusal(
                ah, base | genesys_signature(ah, base, KEY, b"another secret")
            ),
        }


def test_with_a_client_secret_only_handshakes_genesys_signed_are_taken(
    tiny_model_dir: Path, workers: str
) -> None:
    out = asyncio.run(asyncio.wait_for(signed_outcomes(tiny_model_dir, workers), TIMEOUT_S))
    assert out["valid"] == "opened"
    assert out["tampered"] == (401, "bad signature: Signature did not match digest.\n")
    assert out["missing"][0] == 401 and "not signed" in out["missing"][1]
    assert out["wrong secret"] == (401, "bad signature: Signature did not match digest.\n")
