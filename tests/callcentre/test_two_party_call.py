"""Acceptance: a two-party call through each call-centre ingest, read by a subscriber.

The same espeak call (two voices, overlapping turns, 8 kHz μ-law) goes through protocol v1
multichannel, a Twilio Media Streams emulator and a Genesys AudioHook emulator. In each,
a subscriber gets per-channel finals whose text is the offline decode of that channel's
own segment (the test model's text is garbage, but fixed), at the times of the v1 run,
and its `end` only after every owed final.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import connect

from engine.backends.registry import BackendOptions, create_backend
from engine.decoding.recognizer import Recognizer
from engine.model.directory import load_model_dir
from engine.types import DecodeOptions
from sensestream.client import multichannel_start
from tests.callcentre.audiohook_emulator import AudioHookCall, AudioHookRun, Pause, play
from tests.callcentre.call import LABELS, QUIET, RATE, Call, make_call
from tests.callcentre.subscriber import Followed, follow
from tests.callcentre.twilio_emulator import TwilioCall, play_call
from tests.server.conftest import ServerProcess
from tests.speech import chunks

KEY = "callcentre-test-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
TIMEOUT_S = 180.0
#: How far a protocol's final times may sit from the v1 run's.
TOLERANCE_MS = 100


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, workers: str) -> Iterator[ServerProcess]:
    proc = ServerProcess(tiny_model_dir, "--api-keys", KEY, "--workers", workers)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def call(tmp_path_factory: pytest.TempPathFactory) -> Call:
    return make_call(tmp_path_factory.mktemp("call"))


@pytest.fixture(scope="module")
def recognizer(tiny_model_dir: Path) -> Recognizer:
    model_dir = load_model_dir(tiny_model_dir)
    return Recognizer(model_dir, create_backend(model_dir, BackendOptions(precision="fp32")))


def run(scenario: Any) -> Any:
    return asyncio.run(asyncio.wait_for(scenario, TIMEOUT_S))


async def v1_call(url: str, call: Call, stream_id: str) -> None:
    """The call as one v1 multichannel stream of 100 ms stereo frames at real pace."""
    start = multichannel_start(stream_id, LABELS, RATE)
    loop = asyncio.get_running_loop()
    async with connect(url, additional_headers=AUTH) as ws:
        await ws.send(json.dumps(start))
        t0 = loop.time()
        for i, frame in enumerate(chunks(call.stereo(), 2 * RATE // 10)):
            await asyncio.sleep(max(0.0, t0 + i * 0.1 - loop.time()))
            await ws.send(frame)
        await ws.send(json.dumps({"type": "stop"}))
        async for _ in ws:
            pass


async def followed_while(url: str, stream_id: str, caller: Any) -> Followed:
    """A subscriber's view of the stream `caller` plays (it subscribes first)."""
    follower = asyncio.create_task(follow(url, stream_id, AUTH))
    await caller
    return await follower


@pytest.fixture(scope="module")
def v1_run(server: ServerProcess, call: Call) -> Followed:
    return run(followed_while(server.url, "v1-call", v1_call(server.url, call, "v1-call")))


def offline(
    recognizer: Recognizer, audio: np.ndarray, final: dict[str, Any], options: DecodeOptions
) -> str:
    segment = audio[final["start_ms"] * 16 : final["end_ms"] * 16]
    return recognizer.decode([recognizer.prepare(segment, options)])[0].text


def check_call(
    followed: Followed,
    call: Call,
    recognizer: Recognizer,
    parties: tuple[int, int] = (0, 1),
    labels: tuple[str, str] = LABELS,
) -> list[dict[str, Any]]:
    """Per-channel finals that are each channel's own speech, then `end` after them all.

    `parties[c]` is the call's channel (0 agent, 1 customer) that stream channel c carries.
    Returns the finals with their channels renamed to the call's.
    """
    assert followed.events[0]["type"] == "ready" and followed.events[-1]["type"] == "end"
    assert followed.close_code == 1000
    finals = followed.of("final")
    started = followed.of("speech_started")
    # Every utterance the subscriber saw start got its final before the end.
    assert sorted((e["channel"], e["utt_id"]) for e in started) == sorted(
        (f["channel"], f["utt_id"]) for f in finals
    )
    heard = [call.heard(c) for c in range(2)]
    # Decoded with the stream's own prompts (AudioHook's `open` names a language).
    config = followed.events[0]["config"]
    options = DecodeOptions(config["language"], config["itn"])
    for final in finals:
        assert final["label"] == labels[final["channel"]]
        channel = parties[final["channel"]]
        assert final["text"] == offline(recognizer, heard[channel], final, options)
        # Its span is speech of its own channel, never only the other party's.
        mid = (final["start_ms"] + final["end_ms"]) / 2000
        own = [(s, e) for c, s, e in call.spans if c == channel]
        assert any(s - 0.5 <= mid <= e + 0.5 for s, e in own), (final, own)
    assert {f["channel"] for f in finals} == {0, 1}
    return [f | {"channel": parties[f["channel"]]} for f in finals]


def spans(finals: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    return sorted((f["channel"], f["start_ms"], f["end_ms"]) for f in finals)


def assert_same_times(finals: list[dict[str, Any]], reference: list[dict[str, Any]]) -> None:
    got, want = spans(finals), spans(reference)
    assert len(got) == len(want), (got, want)
    for (c1, s1, e1), (c2, s2, e2) in zip(got, want, strict=True):
        assert c1 == c2 and abs(s1 - s2) <= TOLERANCE_MS and abs(e1 - e2) <= TOLERANCE_MS


def test_v1_multichannel_call(v1_run: Followed, call: Call, recognizer: Recognizer) -> None:
    finals = check_call(v1_run, call, recognizer)
    # Both parties' speech was found: at least one final per turn.
    assert len(finals) >= len(call.spans)


def test_twilio_call(
    server: ServerProcess, call: Call, recognizer: Recognizer, v1_run: Followed
) -> None:
    # Twilio's inbound track is the caller (our customer), outbound what the caller hears.
    twilio = TwilioCall(call.channels[1], call.channels[0], "CA" + "5" * 32, {"api_key": KEY})
    url = server.url.replace("/ws", "/twilio")
    # 20 ms frames at real pace, shuffled by a few frames; Twilio hangs up after `stop`.
    played = play_call(url, twilio, speed=1.0, shuffle_frames=3, close_after_stop=True)
    followed = run(followed_while(server.url, twilio.call_sid, played))
    finals = check_call(followed, call, recognizer, (1, 0), ("inbound", "outbound"))
    assert_same_times(finals, check_call(v1_run, call, recognizer))


def test_audiohook_call(
    server: ServerProcess, call: Call, recognizer: Recognizer, v1_run: Followed
) -> None:
    quiet_from, quiet_to = QUIET
    hook = AudioHookCall(
        call.stereo(),
        "4b1a2b7e-5c1d-4f7a-9e0b-1c2d3e4f5a6b",
        channels=("internal", "external"),  # Genesys' agent and customer
        frame_ms=20,
        ping_at_s=3.0,
        # Paused where neither party speaks: every utterance after it must keep its time.
        pause=Pause(at_s=quiet_from, seconds=quiet_to - quiet_from),
        api_key=KEY,
    )
    url = server.url.replace("/ws", "/audiohook")
    played: AudioHookRun
    followed: Followed

    async def scenario() -> tuple[AudioHookRun, Followed]:
        follower = asyncio.create_task(follow(server.url, hook.conversation_id, AUTH))
        return await play(url, hook), await follower

    played, followed = run(scenario())
    finals = check_call(followed, call, recognizer, (0, 1), ("internal", "external"))
    assert_same_times(finals, check_call(v1_run, call, recognizer))
    # Genesys got every non-empty final as a transcript, and `closed` after the last.
    assert played.messages[-1]["type"] == "closed"
    assert len(played.transcripts()) == len([f for f in finals if f["text"]])
