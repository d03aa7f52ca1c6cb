"""Text committed at the pauses inside an utterance, on a real server with the demo model
(`--commit pauses`): v1 `committed` events, OpenAI SDK deltas and FunASR online text come
during speech, and every path's final is the same function of the audio (issue 49)."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
import soxr
from funasr_client import async_file_asr_stream
from openai import AsyncOpenAI

from sensestream.client import run_session
from tests.server.conftest import ServerProcess
from tests.server.test_redaction import upload
from tests.speech import to_s16le
from tools.speech import synthesize

SR = 16000
TIMEOUT_S = 90.0
DELTA = "conversation.item.input_audio_transcription.delta"
COMPLETED = "conversation.item.input_audio_transcription.completed"
#: One utterance of three clauses, 300 ms apart.
CLAUSES = (
    "I would like to cancel my account",
    "and also update my address",
    "because I moved last month",
)


@pytest.fixture(scope="module")
def server(demo_model: Path) -> Iterator[ServerProcess]:
    # An utterance ends after 800 ms of silence (a call's turn), so its clauses' pauses,
    # which the FSMN measures at 200-300 ms, commit text inside it.
    proc = ServerProcess(demo_model, "--commit", "pauses", "--end-silence-ms", "800")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def talk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The clauses as one utterance: each clause trimmed of espeak's own silence, then
    300 ms of silence between them, 0.3 s before and 1.5 s after."""
    folder = tmp_path_factory.mktemp("live-text")
    parts = []
    for i, text in enumerate(CLAUSES):
        raw, trimmed = synthesize(text, "en-us", folder), folder / f"clause{i}.wav"
        trim = ["silence", "1", "0.02", "1%", "reverse", "silence", "1", "0.02", "1%", "reverse"]
        subprocess.run(["sox", str(raw), "-r", str(SR), str(trimmed), *trim], check=True)
        audio, _ = soundfile.read(trimmed, dtype="float32")
        parts += [audio, np.zeros(int(0.3 * SR), np.float32)]
    audio = np.concatenate([np.zeros(int(0.3 * SR), np.float32), *parts[:-1]])
    out = folder / "talk.wav"
    soundfile.write(out, np.concatenate([audio, np.zeros(int(1.5 * SR), np.float32)]), SR)
    return out


def pcm(path: Path, rate: int = SR) -> bytes:
    audio, sr = soundfile.read(path, dtype="float32")
    return to_s16le(audio if sr == rate else soxr.resample(audio, sr, rate))


def test_v1_commits_text_during_speech_and_the_final_starts_with_it(
    server: ServerProcess, talk: Path
) -> None:
    outcome = asyncio.run(run_session(server.url, pcm(talk), start={"type": "start"}, speed=1.0))
    (final,) = outcome.of("final")
    committed = outcome.timed("committed")
    assert len(committed) >= 2, outcome.events  # at the two pauses
    joined = "".join(str(e["text"]) for e, _ in committed)
    assert str(final["text"]).startswith(joined) and joined
    # Committed during speech: the first long before the utterance ended.
    (stopped_at,) = [t for e, t in zip(outcome.events, outcome.times, strict=True) if e is final]
    assert committed[0][1] < stopped_at - 1.0
    # The same audio replayed, and uploaded to the file API, is cut by the same rule.
    replay = asyncio.run(run_session(server.url, pcm(talk), start={"type": "start"}))
    assert [f["text"] for f in replay.of("final")] == [final["text"]]
    assert json.loads(upload(server, talk, "json"))["text"] == final["text"]


def test_the_openai_sdk_gets_deltas_during_speech_that_join_to_the_transcript(
    server: ServerProcess, talk: Path
) -> None:
    host = f"127.0.0.1:{server.port}"
    client = AsyncOpenAI(
        api_key="EMPTY", base_url=f"http://{host}/v1", websocket_base_url=f"ws://{host}/v1"
    )
    data = pcm(talk, 24000)

    async def scenario() -> list[Any]:
        async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
            fmt = {"format": {"type": "audio/pcm", "rate": 24000}}
            await conn.session.update(session={"type": "transcription", "audio": {"input": fmt}})
            step = 4800  # 100 ms at 24 kHz
            for offset in range(0, len(data), step):
                piece = base64.b64encode(data[offset : offset + step]).decode()
                await conn.input_audio_buffer.append(audio=piece)
                await asyncio.sleep(0.1)  # as a microphone sends
            events = []
            async for event in conn:
                events.append(event)
                if event.type == COMPLETED:
                    return events
        return events

    events = asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))
    kinds = [e.type for e in events]
    (completed,) = [e for e in events if e.type == COMPLETED]
    deltas = [e.delta for e in events if e.type == DELTA]
    assert "".join(deltas) == completed.transcript and len(deltas) >= 2
    # Text came while the speaker was still talking: before the VAD heard the speech stop.
    assert kinds.index(DELTA) < kinds.index("input_audio_buffer.speech_stopped")


def test_funasr_online_clients_get_text_before_the_utterance_ends(
    server: ServerProcess, talk: Path
) -> None:
    url = f"ws://127.0.0.1:{server.port}/funasr"

    async def scenario() -> list[dict[str, Any]]:
        stream = async_file_asr_stream(talk, url, mode="online")  # type: ignore[arg-type]
        return [dict(m) async for m in stream]

    messages = asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))
    online = [str(m["text"]) for m in messages if m.get("mode") == "2pass-online" and m["text"]]
    v1 = asyncio.run(run_session(server.url, pcm(talk), start={"type": "start"}))
    # One utterance, in increments: text came before its end, and adds up to its final.
    assert len(online) >= 2, messages
    assert "".join(online) == v1.of("final")[0]["text"]
