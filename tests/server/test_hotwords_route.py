"""Each protocol's hotword field reaches the decoder: a real server with the demo model.

A phrase the demo model cannot write (characters outside its vocabulary) is refused by name
when the stream starts, before any audio, through every protocol's own error form (the
server checks with the model's tokenizer, which the engine reports); phrases it can write
decode as before, and v1's `ready` echoes them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import soxr
import websockets
from openai import AsyncOpenAI, BadRequestError

from sensestream.client import SessionOptions, converse, pcm16, split
from tests.server.conftest import ServerProcess
from tools.speech import load, synthesize

UNWRITABLE = "阿里巴巴"  # the demo model knows English pieces only
SPOKEN = "your appointment is at three thirty p m"
WRITTEN = "Your appointment is at 3:30 PM."
FAILED = "conversation.item.input_audio_transcription.failed"
COMPLETED = "conversation.item.input_audio_transcription.completed"


@pytest.fixture(scope="module")
def server(demo_model: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(demo_model)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    audio = load(synthesize(SPOKEN, "en-us", tmp_path_factory.mktemp("hotwords")))
    return np.concatenate([audio, np.zeros(16000, np.float32)])  # a pause ends the utterance


def host(server: ServerProcess) -> str:
    return f"127.0.0.1:{server.port}"


async def v1(server: ServerProcess, audio: np.ndarray, hotwords: Any) -> list[dict[str, Any]]:
    start = {"type": "start", "language": "en", "pace": "replay", "hotwords": hotwords}
    options = SessionOptions(start=start, frame_s=0.1, speed=0.0, drain_timeout_s=30)
    outcome = await converse(f"ws://{host(server)}/ws", split(pcm16(audio), 3200), options)
    return list(outcome.events)


async def opening_only(url: str, first: dict[str, Any]) -> tuple[list[dict[str, Any]], int | None]:
    """Send the opening message and no audio: what comes back, and the close code (a
    stream that is not refused waits for audio, and this times out)."""
    async with asyncio.timeout(10), websockets.connect(url) as ws:
        await ws.send(json.dumps(first))
        seen = []
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in ws:
                seen.append(json.loads(message))
        return seen, ws.close_code


def test_v1_hotwords_reach_the_decoder(server: ServerProcess, speech: np.ndarray) -> None:
    start = {"type": "start", "language": "en", "hotwords": [UNWRITABLE, "appointment"]}
    refused, close_code = asyncio.run(opening_only(f"ws://{host(server)}/ws", start))
    assert [e["type"] for e in refused] == ["error", "end"]
    assert refused[0]["code"] == "unsupported_hotword"
    assert UNWRITABLE in refused[0]["message"] and "appointment" not in refused[0]["message"]
    assert close_code == 1008
    taken = asyncio.run(v1(server, speech, {"appointment": 3}))
    (ready,) = [e for e in taken if e["type"] == "ready"]
    assert ready["config"]["hotwords"] == {"appointment": 3.0}
    assert [e["text"] for e in taken if e["type"] == "final"] == [WRITTEN]


async def funasr(server: ServerProcess, audio: np.ndarray, hotwords: str) -> list[dict[str, Any]]:
    start = {"mode": "offline", "wav_name": "call", "is_speaking": True, "svs_lang": "en"}
    async with websockets.connect(f"ws://{host(server)}/funasr") as ws:
        await ws.send(json.dumps({**start, "hotwords": hotwords}))
        for frame in split(pcm16(audio), 6400):
            await ws.send(frame)
        await ws.send(json.dumps({"is_speaking": False}))
        return [json.loads(message) async for message in ws]


def test_funasr_hotwords_reach_the_decoder(server: ServerProcess, speech: np.ndarray) -> None:
    start = {"mode": "offline", "wav_name": "call", "hotwords": json.dumps({UNWRITABLE: 20})}
    refused, _ = asyncio.run(opening_only(f"ws://{host(server)}/funasr", start))
    errors = [m["error"] for m in refused if isinstance(m.get("error"), dict)]
    assert [e["code"] for e in errors] == ["unsupported_hotword"]
    assert UNWRITABLE in errors[0]["message"] and refused[-1]["is_end"]
    taken = asyncio.run(funasr(server, speech, json.dumps({"appointment": 20})))
    assert not [m for m in taken if m.get("error")]
    assert [m["text"] for m in taken if m["text"]] == [WRITTEN]


async def realtime_events(
    server: ServerProcess, audio: np.ndarray, *updates: list[str]
) -> list[Any]:
    """A session updated with each keyword list in turn, then sent `audio` and committed:
    the server's events up to the transcription's outcome."""
    client = AsyncOpenAI(
        api_key="EMPTY",
        base_url=f"http://{host(server)}/v1",
        websocket_base_url=f"ws://{host(server)}/v1",
        max_retries=0,
    )
    pcm = pcm16(soxr.resample(audio, 16000, 24000))
    seen: list[Any] = []
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        for keywords in updates:
            audio_input = {
                "format": {"type": "audio/pcm", "rate": 24000},
                "transcription": {"language": "en", "keywords": keywords},
                "turn_detection": None,
            }
            session: Any = {"type": "transcription", "audio": {"input": audio_input}}
            await conn.session.update(session=session)
        await conn.input_audio_buffer.append(audio=base64.b64encode(pcm).decode())
        await conn.input_audio_buffer.commit()
        async for event in conn:
            seen.append(event)
            if event.type in (FAILED, COMPLETED):
                return seen
    raise AssertionError("the session ended without an answer")


async def realtime(server: ServerProcess, audio: np.ndarray, keywords: list[str]) -> Any:
    """The first error or transcription outcome of a session with these keywords."""
    seen = await realtime_events(server, audio, keywords)
    return next(e for e in seen if e.type in (FAILED, COMPLETED, "error"))


def test_a_refused_realtime_update_changes_nothing(
    server: ServerProcess, speech: np.ndarray
) -> None:
    seen = asyncio.run(realtime_events(server, speech, [UNWRITABLE], ["appointment"]))
    (error,) = [e.error for e in seen if e.type == "error"]
    assert error.code == "unsupported_hotword" and UNWRITABLE in error.message
    assert error.param == "session.audio.input.transcription.keywords"
    # The session reports the update it took, not the refused one.
    updated = [e.session for e in seen if e.type == "session.updated"]
    assert [u.audio.input.transcription.keywords for u in updated[-1:]] == [["appointment"]]
    assert seen[-1].type == COMPLETED and seen[-1].transcript == WRITTEN


def test_openai_keywords_reach_the_decoder(server: ServerProcess, speech: np.ndarray) -> None:
    # Refused as the session is updated, before its audio is transcribed.
    refused = asyncio.run(realtime(server, speech, [UNWRITABLE]))
    assert refused.type == "error" and refused.error.code == "unsupported_hotword"
    assert UNWRITABLE in refused.error.message
    taken = asyncio.run(realtime(server, speech, ["appointment"]))
    assert taken.type == COMPLETED and taken.transcript == WRITTEN


async def file_api(server: ServerProcess, audio: np.ndarray, prompt: str) -> Any:
    client = AsyncOpenAI(api_key="EMPTY", base_url=f"http://{host(server)}/v1", max_retries=0)
    wav = io.BytesIO()
    sf.write(wav, audio, 16000, format="WAV", subtype="PCM_16")
    return await client.audio.transcriptions.create(
        model="sensevoice", file=("call.wav", wav.getvalue()), prompt=prompt, language="en"
    )


def test_a_file_api_prompt_that_lists_phrases_reaches_the_decoder(
    server: ServerProcess, speech: np.ndarray
) -> None:
    with pytest.raises(BadRequestError) as info:
        asyncio.run(file_api(server, speech, f"{UNWRITABLE}, Acme"))
    error = info.value.body
    assert isinstance(error, dict) and error["code"] == "unsupported_hotword"
    assert error["param"] == "prompt" and UNWRITABLE in error["message"]
    # Free text is no hotword list: not refused, not used.
    assert asyncio.run(file_api(server, speech, f"A call in {UNWRITABLE}.")).text == WRITTEN
    assert asyncio.run(file_api(server, speech, "appointment, Acme")).text == WRITTEN


def test_workers_refuse_unwritable_hotwords_at_start_too(demo_model: Path) -> None:
    # Each worker checks with the tokenizer its engine process reported (no decode needed).
    proc = ServerProcess(demo_model, "--workers", "2")
    try:
        start = {"type": "start", "hotwords": [UNWRITABLE]}
        answers = [asyncio.run(opening_only(proc.url, start)) for _ in range(4)]
    finally:
        proc.stop()
    for refused, close_code in answers:
        assert [e["type"] for e in refused] == ["error", "end"] and close_code == 1008
        assert refused[0]["code"] == "unsupported_hotword" and UNWRITABLE in refused[0]["message"]
