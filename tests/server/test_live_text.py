"""Text committed at the pauses inside an utterance, on a real server with the demo model
(`--commit pauses`): v1 `committed` events, OpenAI SDK deltas and FunASR online text come
during speech, and every path's final is the same function of the audio (issue 49)."""

from __future__ import annotations

import asyncio
import base64
import json
import random
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
from tests.sensestream.test_transcribe import transcribe
from tests.server.conftest import ServerProcess
from tests.server.test_redaction import upload
from tests.speech import to_s16le
from tools.speech import synthesize

SR = 16000
TIMEOUT_S = 90.0
DELTA = "conversation.item.input_audio_transcription.delta"
COMPLETED = "conversation.item.input_audio_transcription.completed"
SERVER_OPTIONS = ("--commit", "pauses", "--end-silence-ms", "800")
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
    proc = ServerProcess(demo_model, *SERVER_OPTIONS)
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
    server: ServerProcess, talk: Path, demo_model: Path
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
    # And so is it by `sensestream transcribe` here, with the server's options.
    options = ("--model", str(demo_model), "--precision", "fp32", *SERVER_OPTIONS)
    code, (line,), err = transcribe(str(talk), *options)
    assert code == 0 and line["text"] == final["text"], err


def test_the_openai_sdk_gets_deltas_during_speech_that_join_to_the_transcript(
    server: ServerProcess, talk: Path
) -> None:
    data = pcm(talk, 24000)
    events = asyncio.run(asyncio.wait_for(openai_events(server.port, data, 4800), TIMEOUT_S))
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


@pytest.fixture(scope="module")
def two_workers(demo_model: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        demo_model, "--commit", "pauses", "--end-silence-ms", "800", "--workers", "2"
    )
    yield proc
    proc.stop()


async def openai_events(port: int, data: bytes, step: int) -> list[Any]:
    """The `openai` SDK's Realtime client, `step` bytes of 24 kHz PCM an append at real
    pace, until the first transcript completes."""
    host = f"127.0.0.1:{port}"
    client = AsyncOpenAI(
        api_key="EMPTY", base_url=f"http://{host}/v1", websocket_base_url=f"ws://{host}/v1"
    )
    events: list[Any] = []
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        fmt = {"format": {"type": "audio/pcm", "rate": 24000}}
        await conn.session.update(session={"type": "transcription", "audio": {"input": fmt}})
        for offset in range(0, len(data), step):
            await conn.input_audio_buffer.append(
                audio=base64.b64encode(data[offset : offset + step]).decode()
            )
            await asyncio.sleep(step / 48000)  # as a microphone sends
        async for event in conn:
            events.append(event)
            if event.type == COMPLETED:
                break
    return events


async def funasr_messages(port: int, talk: Path, chunk: int, mode: str) -> list[dict[str, Any]]:
    """FunASR's client (`funasr_client`), `chunk` x 60 ms of audio a message, at pace."""
    stream = async_file_asr_stream(
        talk,
        f"ws://127.0.0.1:{port}/funasr",
        mode=mode,  # type: ignore[arg-type]
        chunk_size=(5, chunk, 5),
    )
    return [dict(m) async for m in stream]


@pytest.mark.parametrize("seed", [1, 2])
def test_on_two_workers_every_protocols_committed_text_is_what_its_final_starts_with(
    two_workers: ServerProcess, talk: Path, seed: int
) -> None:
    """Clients of every protocol at once, with frame sizes drawn at random, on a server of
    two worker processes: v1 finals start with the committed text, OpenAI deltas join to
    `completed`, FunASR's online increments join to its offline text, and the same audio
    gets the same final in every 16 kHz path."""
    rng = random.Random(seed)
    v1_chunk = 2 * rng.randint(80, 8000)  # 5 to 500 ms of 16 kHz s16le
    openai_step = 2 * rng.randint(120, 12000)
    funasr_chunk = rng.randint(1, 10)

    async def scenario() -> tuple[Any, list[Any], list[dict[str, Any]]]:
        start = {"type": "start", "commit": "pauses"}
        return await asyncio.wait_for(
            asyncio.gather(
                run_session(two_workers.url, pcm(talk), start=start, chunk=v1_chunk, speed=1.0),
                openai_events(two_workers.port, pcm(talk, 24000), openai_step),
                funasr_messages(two_workers.port, talk, funasr_chunk, "2pass"),
            ),
            TIMEOUT_S,
        )

    v1, openai, funasr = asyncio.run(scenario())
    finals = [str(e["text"]) for e in v1.of("final") if e["text"]]
    committed = "".join(str(e["text"]) for e in v1.of("committed"))
    assert len(finals) == 1 and committed and finals[0].startswith(committed), v1.events
    deltas = [e.delta for e in openai if e.type == DELTA]
    (completed,) = [e.transcript for e in openai if e.type == COMPLETED]
    assert len(deltas) >= 2 and "".join(deltas) == completed
    online = [str(m["text"]) for m in funasr if m.get("mode") == "2pass-online" and m["text"]]
    offline = [str(m["text"]) for m in funasr if m.get("mode") == "2pass-offline" and m["text"]]
    assert len(online) >= 2 and offline == ["".join(online)] == finals, funasr
