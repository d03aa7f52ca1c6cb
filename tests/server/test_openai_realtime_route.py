"""`/v1/realtime` end to end: the official `openai` SDK, unchanged, against the real server.

Server-VAD sessions are checked against protocol v1 on `/ws` with the same audio: the same
VAD must cut the same utterances, so each `completed` transcript equals a v1 final.
"""

from __future__ import annotations

import asyncio
import base64
import functools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soxr
from openai import AsyncOpenAI
from websockets.exceptions import ConnectionClosedError

from engine.backends.registry import BackendOptions, create_backend
from engine.decoding.recognizer import Recognizer
from engine.model.directory import load_model_dir
from engine.types import DecodeOptions
from sensestream.client import run_session
from streaming.limits import SessionLimits
from streaming.protocols.base import Handshake
from streaming.protocols.openai.realtime import MAX_AUDIO_CHARS, OpenAIRealtimeCodec
from tests.server.conftest import ServerProcess
from tests.speech import Clip, to_s16le
from tools.g711 import encode_mulaw
from tools.speech import noise_floor

SR = 16000
SPEED = 4.0  # times real time: within the live limit of 2x after a 5 s burst
TIMEOUT_S = 60.0
COMPLETED = "conversation.item.input_audio_transcription.completed"
DELTA = "conversation.item.input_audio_transcription.delta"


@dataclass(frozen=True)
class WireFormat:
    """One audio format as the GA and beta dialects name it, and as protocol v1 does."""

    ga: dict[str, Any]
    beta: str
    v1_start: dict[str, Any]
    bytes_per_s: int
    encode: Callable[[np.ndarray], bytes]


def pcm16_24k(audio: np.ndarray) -> bytes:
    return to_s16le(soxr.resample(audio, SR, 24000))


def mulaw_8k(audio: np.ndarray) -> bytes:
    return encode_mulaw(soxr.resample(audio, SR, 8000))


PCM16 = WireFormat(
    {"type": "audio/pcm", "rate": 24000},
    "pcm16",
    {"type": "start", "sample_rate": 24000, "language": "en"},
    48000,
    pcm16_24k,
)
PCMU = WireFormat(
    {"type": "audio/pcmu"},
    "g711_ulaw",
    {"type": "start", "sample_rate": 8000, "encoding": "mulaw", "language": "en"},
    8000,
    mulaw_8k,
)


@pytest.fixture(scope="module")
def two_sentences(speech_clips: list[Clip]) -> np.ndarray:
    """Two English sentences 1.5 s apart, with a tail long enough for the VAD to close."""
    lead, gap, tail = (np.zeros(int(s * SR), np.float32) for s in (0.5, 1.5, 1.5))
    audio = np.concatenate([lead, speech_clips[0].audio, gap, speech_clips[1].audio, tail])
    return (audio + noise_floor(audio.size, seed=11)).astype(np.float32)


@functools.cache
def v1_finals(url: str, data: bytes, start: tuple[tuple[str, Any], ...]) -> list[dict[str, Any]]:
    """The finals protocol v1 gives for the same bytes (a replay: pace does not matter)."""
    outcome = asyncio.run(run_session(url, data, start=dict(start), chunk=4800))
    assert outcome.close_code == 1000
    return outcome.of("final")


def reference(server: ServerProcess, fmt: WireFormat, audio: np.ndarray) -> list[dict[str, Any]]:
    return v1_finals(server.url, fmt.encode(audio), tuple(fmt.v1_start.items()))


def client(server: ServerProcess) -> AsyncOpenAI:
    host = f"127.0.0.1:{server.port}"
    # A plain-HTTP server: the beta client needs the ws:// base spelled out.
    return AsyncOpenAI(
        api_key="EMPTY", base_url=f"http://{host}/v1", websocket_base_url=f"ws://{host}/v1"
    )


def run(scenario: Coroutine[Any, Any, list[Any]]) -> list[Any]:
    return asyncio.run(asyncio.wait_for(scenario, TIMEOUT_S))


async def append_paced(conn: Any, data: bytes, bytes_per_s: int, piece_s: float = 0.1) -> None:
    """Append `data` in `piece_s` pieces at SPEED times real time, as a live client would."""
    loop = asyncio.get_running_loop()
    start, step = loop.time(), int(bytes_per_s * piece_s)
    for i, offset in enumerate(range(0, len(data), step)):
        await asyncio.sleep(max(0.0, start + i * piece_s / SPEED - loop.time()))
        piece = base64.b64encode(data[offset : offset + step]).decode()
        await conn.input_audio_buffer.append(audio=piece)


async def collect(conn: Any, done: Callable[[list[Any]], bool]) -> list[Any]:
    events: list[Any] = []
    async for event in conn:
        events.append(event)
        if done(events):
            break
    return events


def of(events: list[Any], kind: str) -> list[Any]:
    return [e for e in events if e.type == kind]


def completed(count: int) -> Callable[[list[Any]], bool]:
    return lambda events: len(of(events, COMPLETED)) >= count


def check_items(events: list[Any]) -> None:
    """Each utterance's events share one item id, and its deltas add up to its transcript."""
    started = of(events, "input_audio_buffer.speech_started")
    stopped = of(events, "input_audio_buffer.speech_stopped")
    committed = of(events, "input_audio_buffer.committed")
    finals = of(events, COMPLETED)
    assert len(started) == len(stopped) == len(committed) == len(finals)
    for i, final in enumerate(finals):
        item = started[i].item_id
        assert stopped[i].item_id == committed[i].item_id == final.item_id == item
        assert committed[i].previous_item_id == (committed[i - 1].item_id if i else None)
        extras = final.model_extra["sensevoice"]
        assert extras["start_ms"] == started[i].audio_start_ms
        assert extras["end_ms"] == stopped[i].audio_end_ms
    ids = [e.event_id for e in events]
    assert len(set(ids)) == len(ids)
    # Deltas only append and promise only what the transcript keeps (issue 33).
    for final in finals:
        deltas = [e.delta for e in of(events, DELTA) if e.item_id == final.item_id]
        assert "".join(deltas) == final.transcript


async def transcribe_english(conn: Any, fmt: WireFormat) -> None:
    """A GA transcription session in `fmt`, English, with the server's VAD."""
    audio_input = {"format": fmt.ga, "transcription": {"model": "x", "language": "en"}}
    await conn.session.update(session={"type": "transcription", "audio": {"input": audio_input}})


@pytest.mark.parametrize("fmt", [PCM16, PCMU], ids=["pcm16", "pcmu"])
def test_ga_server_vad_transcripts_equal_v1_finals(
    server: ServerProcess, two_sentences: np.ndarray, fmt: WireFormat
) -> None:
    expected = reference(server, fmt, two_sentences)
    assert len(expected) == 2

    async def scenario() -> list[Any]:
        realtime = client(server).realtime
        async with realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await transcribe_english(conn, fmt)
            sender = asyncio.create_task(
                append_paced(conn, fmt.encode(two_sentences), fmt.bytes_per_s)
            )
            events = await collect(conn, completed(len(expected)))
            await sender
            return events

    events = run(scenario())
    assert [e.type for e in events[:2]] == ["session.created", "session.updated"]
    assert events[1].session.audio.input.format.type == fmt.ga["type"]
    finals = of(events, COMPLETED)
    assert [f.transcript for f in finals] == [e["text"] for e in expected]
    spans = [
        (f.model_extra["sensevoice"]["start_ms"], f.model_extra["sensevoice"]["end_ms"])
        for f in finals
    ]
    assert spans == [(e["start_ms"], e["end_ms"]) for e in expected]
    check_items(events)


def test_a_recording_appended_in_one_burst_gets_every_transcript(
    server: ServerProcess, two_sentences: np.ndarray
) -> None:
    # As OpenAI's own examples send a file: every piece appended at once, no pacing and no
    # `pace` field (OpenAI's clients have none). The server reads the pieces as its pace
    # allows (TCP holds the rest) instead of refusing them as too fast.
    data = PCM16.encode(np.concatenate([two_sentences] * 2))  # about 17 s
    expected = reference(server, PCM16, np.concatenate([two_sentences] * 2))
    assert len(expected) == 4

    async def scenario() -> list[Any]:
        realtime = client(server).realtime
        async with realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await transcribe_english(conn, PCM16)
            step = PCM16.bytes_per_s // 10
            for offset in range(0, len(data), step):
                piece = base64.b64encode(data[offset : offset + step]).decode()
                await conn.input_audio_buffer.append(audio=piece)
            return await collect(
                conn, lambda events: completed(len(expected))(events) or bool(of(events, "error"))
            )

    events = run(scenario())
    assert of(events, "error") == []
    assert [f.transcript for f in of(events, COMPLETED)] == [e["text"] for e in expected]


@pytest.fixture(scope="module")
def recognizer(tiny_model_dir: Path) -> Recognizer:
    model_dir = load_model_dir(tiny_model_dir)
    return Recognizer(model_dir, create_backend(model_dir, BackendOptions(precision="fp32")))


def test_ga_manual_commits_transcribe_exactly_the_committed_audio(
    server: ServerProcess, speech_clips: list[Clip], recognizer: Recognizer
) -> None:
    pad = np.zeros(SR // 4, np.float32)
    data = to_s16le(np.concatenate([pad, speech_clips[0].audio, pad]))
    session = {
        "type": "transcription",
        # 16 kHz: an extension to OpenAI's 24 kHz, so the server hears these very samples.
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": SR}, "turn_detection": None}},
        "include": ["item.input_audio_transcription.logprobs"],
    }

    async def scenario() -> list[Any]:
        realtime = client(server).realtime
        async with realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await conn.session.update(session=session)
            await append_paced(conn, data, 2 * SR)
            await conn.input_audio_buffer.commit(event_id="c1")
            await conn.input_audio_buffer.commit(event_id="c2")  # nothing new to commit
            return await collect(
                conn, lambda events: bool(of(events, "error")) and completed(1)(events)
            )

    events = run(scenario())
    kinds = {e.type for e in events}
    assert "input_audio_buffer.speech_started" not in kinds  # no server VAD
    (committed,) = of(events, "input_audio_buffer.committed")
    (final,) = of(events, COMPLETED)
    assert final.item_id == committed.item_id and committed.previous_item_id is None
    heard = np.frombuffer(data, "<i2").astype(np.float32) / 32768
    offline = recognizer.decode([recognizer.prepare(heard, DecodeOptions())])[0].text
    assert final.transcript == offline
    assert final.model_extra["sensevoice"]["end_ms"] == len(heard) * 1000 // SR
    # The session includes logprobs: one a token, joining to the transcript.
    assert final.logprobs and "".join(lp.token for lp in final.logprobs) == final.transcript
    assert all(lp.logprob is not None and lp.logprob <= 0 for lp in final.logprobs)
    (error,) = of(events, "error")
    assert error.error.code == "input_audio_buffer_commit_empty"
    assert error.error.event_id == "c2" and error.error.type == "invalid_request_error"


def test_beta_dialect_session_with_prefix_padding(
    server: ServerProcess, two_sentences: np.ndarray
) -> None:
    expected = reference(server, PCM16, two_sentences)
    turns = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300}

    async def scenario() -> list[Any]:
        realtime = client(server).beta.realtime
        async with realtime.connect(
            model="whisper-1", extra_query={"intent": "transcription"}
        ) as conn:
            await conn.transcription_session.update(
                session={
                    "input_audio_format": "pcm16",
                    "input_audio_transcription": {"model": "whisper-1", "language": "en"},
                    "turn_detection": turns,
                    "input_audio_noise_reduction": {"type": "near_field"},
                }
            )
            await conn.send({"type": "response.create", "event_id": "bad1"})  # not here
            sender = asyncio.create_task(
                append_paced(conn, PCM16.encode(two_sentences), PCM16.bytes_per_s)
            )
            events = await collect(conn, completed(len(expected)))
            await sender
            return events

    events = run(scenario())
    assert [e.type for e in events[:2]] == [
        "transcription_session.created",
        "transcription_session.updated",
    ]
    updated = events[1].session
    assert updated.input_audio_format == "pcm16"
    assert updated.turn_detection.prefix_padding_ms == 300
    (error,) = of(events, "error")
    assert (error.error.code, error.error.param, error.error.event_id) == (
        "invalid_value",
        "type",
        "bad1",
    )
    finals = of(events, COMPLETED)
    # The same cuts as v1, each opening 200 ms earlier: 300 ms of padding instead of 100.
    starts = [f.model_extra["sensevoice"]["start_ms"] for f in finals]
    ends = [f.model_extra["sensevoice"]["end_ms"] for f in finals]
    assert starts == [e["start_ms"] - 200 for e in expected]
    assert ends == [e["end_ms"] for e in expected]
    assert all(f.logprobs is None for f in finals)  # the session did not include them
    check_items(events)


def test_oversized_audio_ends_the_session_with_an_error_and_1009(server: ServerProcess) -> None:
    # Just over OpenAI's 15 MiB of audio, yet within the message cap: answered, not cut off.
    huge = base64.b64encode(b"\x00" * (MAX_AUDIO_CHARS // 4 * 3 + 3)).decode()
    assert (
        MAX_AUDIO_CHARS
        < len(huge)
        < OpenAIRealtimeCodec(Handshake(), SessionLimits()).max_message_bytes
    )

    async def scenario() -> list[Any]:
        realtime = client(server).realtime
        events: list[Any] = []
        async with realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await conn.input_audio_buffer.append(audio=huge, event_id="big")
            with pytest.raises(ConnectionClosedError) as closed:
                async for event in conn:
                    events.append(event)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        return events

    events = run(scenario())
    assert [e.type for e in events] == ["session.created", "error"]
    assert events[1].error.code == "frame_too_large" and events[1].error.event_id == "big"
