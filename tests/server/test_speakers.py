"""Speaker labels on a real server (issue 50): the demo model decodes, Resemblyzer's GE2E
encoder embeds each final's speech in the engine, and v1 finals, the file API's
`diarized_json` (through the openai SDK) and FunASR's results name who spoke."""

from __future__ import annotations

import asyncio
import base64
import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile
from openai import BadRequestError, OpenAI

from sensestream.client import run_session
from tests.sensestream.test_transcribe import transcribe
from tests.server.conftest import WORKER_READY, ServerProcess
from tests.server.test_funasr_route import root_url, upstream_client
from tests.speech import to_s16le
from tools.demo_model.voices import Voice, speak

SR = 16000
#: A call: the agent (flite's slt), the caller (espeak-ng), the agent again.
TURNS = (
    (Voice("flite", "slt"), "Thank you for calling, how can I help you today?"),
    (Voice("espeak", "en-us"), "My order never arrived and I would like a refund."),
    (Voice("flite", "slt"), "I am sorry to hear that, let me check your order."),
)


@pytest.fixture(scope="module")
def server(demo_model: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(demo_model)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def call() -> bytes:
    """The turns with 1.2 s of silence between them (longer than the end silence)."""
    gap = np.zeros(int(1.2 * SR), np.float32)
    parts = [gap]
    for voice, text in TURNS:
        parts += [speak(text, voice), gap]
    return to_s16le(np.concatenate(parts))


def finals(call: bytes, server: ServerProcess, **start: object) -> list[dict[str, object]]:
    outcome = asyncio.run(run_session(server.url, call, start={"type": "start", **start}))
    return outcome.of("final")


def test_finals_name_who_spoke_when_a_stream_asks(server: ServerProcess, call: bytes) -> None:
    got = finals(call, server, diarize=True)
    assert [f["speaker"] for f in got] == ["S1", "S2", "S1"], [f["text"] for f in got]


def test_one_voice_is_one_speaker_and_a_stream_that_does_not_ask_gets_none(
    server: ServerProcess, call: bytes
) -> None:
    agent = to_s16le(speak(TURNS[0][1], TURNS[0][0]))
    gap = to_s16le(np.zeros(int(1.2 * SR), np.float32))
    got = finals(gap + agent + gap + agent + gap, server, diarize=True)
    assert [f["speaker"] for f in got] == ["S1", "S1"]
    assert all("speaker" not in f for f in finals(call, server))


def test_max_speakers_caps_the_labels(server: ServerProcess, call: bytes) -> None:
    got = finals(call, server, diarize=True, max_speakers=1)
    assert [f["speaker"] for f in got] == ["S1", "S1", "S1"]


def test_the_openai_sdk_parses_diarized_json(
    server: ServerProcess, call: bytes, tmp_path: Path
) -> None:
    wav = tmp_path / "call.wav"
    soundfile.write(wav, np.frombuffer(call, "<i2"), SR)
    client = OpenAI(api_key="unused", base_url=f"http://127.0.0.1:{server.port}/v1", max_retries=0)
    with wav.open("rb") as f:
        done = client.audio.transcriptions.create(
            file=f, model="gpt-4o-transcribe-diarize", response_format="diarized_json"
        )
    assert [s.speaker for s in done.segments] == ["A", "B", "A"]
    assert all(s.type == "transcript.text.segment" and s.end > s.start for s in done.segments)
    assert done.text == " ".join(s.text for s in done.segments)


def test_funasr_clients_get_spk_name_from_a_diarizing_server(demo_model: Path, call: bytes) -> None:
    proc = ServerProcess(demo_model, "--diarize")
    try:
        run = asyncio.run(upstream_client(root_url(proc), call, "2pass", itn=True))
    finally:
        proc.stop()
    offline = [m for m in run.messages if m["mode"] == "2pass-offline" and m["text"]]
    assert [m["spk_name"] for m in offline] == ["S1", "S2", "S1"]
    assert all(0.0 < m["spk_score"] <= 1.0 for m in offline)


def data_url(audio: np.ndarray) -> str:
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, SR, format="WAV", subtype="PCM_16")
    return "data:audio/wav;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_known_speakers_name_the_speakers_of_a_file(
    server: ServerProcess, call: bytes, tmp_path: Path
) -> None:
    wav = tmp_path / "call.wav"
    soundfile.write(wav, np.frombuffer(call, "<i2"), SR)
    # Other words than the call's, in each party's voice.
    agent = speak("Good afternoon, you are through to the billing team.", TURNS[0][0])
    caller = speak("Hello, I have a question about my last invoice please.", TURNS[1][0])
    client = OpenAI(api_key="unused", base_url=f"http://127.0.0.1:{server.port}/v1", max_retries=0)
    with wav.open("rb") as f:
        done = client.audio.transcriptions.create(
            file=f,
            model="gpt-4o-transcribe-diarize",
            response_format="diarized_json",
            known_speaker_names=["caller", "agent"],
            known_speaker_references=[data_url(caller), data_url(agent)],
        )
    assert [s.speaker for s in done.segments] == ["agent", "caller", "agent"]


def test_a_known_speaker_reference_that_is_not_audio_is_a_clear_400(
    server: ServerProcess, call: bytes, tmp_path: Path
) -> None:
    wav = tmp_path / "call.wav"
    soundfile.write(wav, np.frombuffer(call, "<i2"), SR)
    text = "data:text/plain;base64," + base64.b64encode(b"not a voice at all").decode()
    client = OpenAI(api_key="unused", base_url=f"http://127.0.0.1:{server.port}/v1", max_retries=0)
    with wav.open("rb") as f, pytest.raises(BadRequestError) as caught:
        client.audio.transcriptions.create(
            file=f,
            model="gpt-4o-transcribe-diarize",
            response_format="diarized_json",
            known_speaker_names=["agent"],
            known_speaker_references=[text],
        )
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == "known_speaker_references[0]"
    assert "is not audio" in error["message"]


def test_the_commands_label_speakers_with_diarize(
    server: ServerProcess, call: bytes, demo_model: Path, tmp_path: Path
) -> None:
    wav = tmp_path / "call.wav"
    soundfile.write(wav, np.frombuffer(call, "<i2"), SR)
    command = [sys.executable, "-m", "sensestream", "stream", str(wav), "--url", server.url]
    streamed = subprocess.run(
        [*command, "--speed", "0", "--diarize", "--out", str(tmp_path / "call.txt")],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    lines = (tmp_path / "call.txt").read_text().splitlines()
    assert [line.split("]")[0] for line in lines] == ["[S1", "[S2", "[S1"], streamed.stderr
    code, out, err = transcribe(str(wav), "--model", str(demo_model), "--diarize")
    assert code == 0, err
    assert [s["speaker"] for s in out[0]["segments"]] == ["S1", "S2", "S1"]


def test_two_workers_label_speakers_through_the_engine_process(
    demo_model: Path, call: bytes
) -> None:
    proc = ServerProcess(demo_model, "--workers", "2")
    try:
        proc.wait_for(WORKER_READY, count=2)
        got = finals(call, proc, diarize=True)
    finally:
        proc.stop()
    assert [f["speaker"] for f in got] == ["S1", "S2", "S1"]
