"""Bad client input: a typed error event and close code, while other sessions go on."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest

from sensestream.client import Outcome, run_session
from tests.server.conftest import ServerProcess
from tests.speech import Clip, to_s16le

SR = 16000
NAN_F32 = np.array([0.1, np.nan, 0.2, 0.3], dtype="<f4").tobytes()
BASE64_AUDIO = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAgD4AAAB9AAACABAAZGF0YQ"
INF_F32 = np.array([0.1, np.inf, 0.2, -np.inf], dtype="<f4").tobytes()

CASES = [
    # (name, start message, extra frames after the audio, expected code, close code)
    ("malformed_json", None, ["{this is not json"], "malformed_json", 1007),
    ("unknown_type", None, ['{"type":"pause"}'], "unknown_type", 1002),
    ("bad_rate", {"type": "start", "sample_rate": 12345}, [], "invalid_field", 1008),
    ("bad_encoding", {"type": "start", "encoding": "mp3"}, [], "invalid_field", 1008),
    ("second_start", None, ['{"type":"start"}'], "unexpected_message", 1002),
    ("nan_samples", {"type": "start", "encoding": "pcm_f32le"}, [NAN_F32], "invalid_audio", 1007),
    ("inf_samples", {"type": "start", "encoding": "pcm_f32le"}, [INF_F32], "invalid_audio", 1007),
    # Base64 audio in a text frame, where binary audio was expected.
    ("text_for_audio", None, [BASE64_AUDIO], "malformed_json", 1007),
]


def speech(clips: list[Clip]) -> np.ndarray:
    return np.concatenate([np.zeros(SR // 2, np.float32), clips[1].audio, np.zeros(SR, np.float32)])


@pytest.mark.parametrize(
    ("name", "start", "extra", "code", "close"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_input_is_a_typed_error_and_others_are_unaffected(
    server: ServerProcess,
    speech_clips: list[Clip],
    name: str,
    start: dict | None,
    extra: list,
    code: str,
    close: int,
) -> None:
    audio = speech(speech_clips)
    own = (
        audio.astype("<f4").tobytes()
        if start and start.get("encoding") == "pcm_f32le"
        else to_s16le(audio)
    )

    async def both() -> tuple[Outcome, Outcome]:
        healthy = run_session(server.url, to_s16le(audio), speed=4.0)
        bad = run_session(server.url, own, start=start, extra=extra, speed=4.0, stop=False)
        return await asyncio.gather(healthy, bad)

    healthy, bad = asyncio.run(both())
    errors = bad.of("error")
    assert errors and errors[0]["code"] == code, bad.events
    assert errors[0]["message"]
    assert bad.close_code == close
    if name not in ("bad_rate", "bad_encoding"):
        # The speech before the bad message still gets its final.
        assert bad.of("final"), bad.events
    else:
        assert not bad.of("ready")  # the stream never started
    assert bad.events[-1]["type"] == "end"
    # The neighbour's one utterance got its final, complete, and a new session works.
    assert len(healthy.of("final")) == 1 and healthy.events[-1]["type"] == "end"
    assert healthy.close_code == 1000
    fresh = asyncio.run(run_session(server.url, to_s16le(audio)))
    assert len(fresh.of("final")) == 1 and fresh.close_code == 1000


def test_audio_after_stop_is_an_error(server: ServerProcess, speech_clips: list[Clip]) -> None:
    # The bad stream stops mid-speech, so its final is still owed when the stray audio
    # arrives (after `end` the socket is closing and nothing more is said).
    audio = to_s16le(speech(speech_clips))
    mid_speech = to_s16le(np.concatenate([np.zeros(SR // 2, np.float32), speech_clips[1].audio]))

    async def both() -> tuple[Outcome, Outcome]:
        healthy = run_session(server.url, audio, speed=4.0)
        extra: list[bytes | str] = ['{"type":"stop"}', b"\x00\x00" * 800]
        bad = run_session(server.url, mid_speech, extra=extra, stop=False)
        return await asyncio.gather(healthy, bad)

    healthy, bad = asyncio.run(both())
    assert bad.of("error")[0]["code"] == "unexpected_message"
    assert bad.of("final")
    assert bad.close_code == 1002
    assert len(healthy.of("final")) == 1 and healthy.close_code == 1000
    fresh = asyncio.run(run_session(server.url, audio))
    assert len(fresh.of("final")) == 1 and fresh.close_code == 1000


def test_ready_reports_effective_config(server: ServerProcess, speech_clips: list[Clip]) -> None:
    start = {"type": "start", "sample_rate": 8000, "encoding": "mulaw", "language": "en"}
    outcome = asyncio.run(run_session(server.url, b"\xff" * 8000, start=start))
    ready = outcome.of("ready")[0]
    assert ready["config"]["sample_rate"] == 8000 and ready["config"]["language"] == "en"
    assert ready["test_model"] is True and ready["v"] == 1
    assert json.dumps(ready)


def test_disconnect_mid_utterance_frees_the_session(
    server: ServerProcess, speech_clips: list[Clip]
) -> None:
    audio = to_s16le(speech(speech_clips))

    async def scenario() -> Outcome:
        from websockets.asyncio.client import connect

        healthy = asyncio.create_task(run_session(server.url, audio, speed=4.0))
        for _ in range(3):
            async with connect(server.url, compression=None) as ws:
                await ws.send(json.dumps({"type": "start", "pace": "replay"}))
                await ws.send(audio[: len(audio) // 2])  # mid-utterance, then vanish
                await ws.recv()  # ready
            # leaving the block closes the socket without a stop
        return await healthy

    healthy = asyncio.run(scenario())
    assert len(healthy.of("final")) == 1 and healthy.close_code == 1000
    # The healthy session's handler may still be finishing its close; give it a moment.
    deadline = time.monotonic() + 5
    while (stats := json.loads(server.http("/stats")[1]))[
        "sessions"
    ] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stats["sessions"] == 0, stats
    assert stats["queue"]["depth"] == 0
    fresh = asyncio.run(run_session(server.url, audio))
    assert len(fresh.of("final")) == 1 and fresh.close_code == 1000
