"""/funasr on a real server: the PyPI funasr-client, the html5 client's whole-file way, errors.

Acceptance: what FunASR's clients get as finals is what protocol v1 gets for the same
audio on the same server (the test model is random, so texts are garbage, but fixed).
funasr-client 0.1.6 is used through its async API: its sync `file_asr` deadlocks in
`close()` (it takes its own non-reentrant lock twice), whatever the server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import soxr
from funasr_client import async_file_asr, async_file_asr_stream
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from sensestream.client import run_session
from tests.server.conftest import ServerProcess
from tests.speech import Clip, chunks, to_s16le

SR = 16000


@pytest.fixture(scope="module")
def speech(speech_clips: list[Clip]) -> np.ndarray:
    """Two sentences 1.5 s apart (two utterances), as an s16le client sends them."""
    edge, gap = np.zeros(SR // 2, np.float32), np.zeros(3 * SR // 2, np.float32)
    audio = np.concatenate([edge, speech_clips[0].audio, gap, speech_clips[1].audio, edge])
    return quantized(audio)


def quantized(audio: np.ndarray) -> np.ndarray:
    return np.frombuffer(to_s16le(audio), "<i2").astype(np.float32) / 32768


def write_wav(path: Path, audio: np.ndarray, rate: int) -> Path:
    sf.write(path, audio, rate, subtype="PCM_16")
    return path


def funasr_url(server: ServerProcess) -> str:
    return f"ws://127.0.0.1:{server.port}/funasr"


def v1_finals(server: ServerProcess, audio: np.ndarray, rate: int = SR) -> list[str]:
    start = {"type": "start", "sample_rate": rate, "pace": "replay"}
    outcome = asyncio.run(run_session(server.url, to_s16le(audio), start=start, linger=60))
    assert outcome.ended and outcome.close_code == 1000
    texts = [str(e["text"]) for e in outcome.of("final")]
    assert texts and all(texts)  # the comparison below must compare something
    return texts


async def client_messages(wav: Path, url: str, mode: str) -> list[dict[str, Any]]:
    return [dict(m) async for m in async_file_asr_stream(wav, url, mode=mode)]  # type: ignore[arg-type]


def offline_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["text"] for m in messages if m["mode"] == "2pass-offline" and not m["is_final"]]


@pytest.mark.parametrize("mode", ["offline", "2pass"])
def test_funasr_client_gets_v1s_finals(
    server: ServerProcess, speech: np.ndarray, tmp_path: Path, mode: str
) -> None:
    wav = write_wav(tmp_path / "speech.wav", speech, SR)
    expected = v1_finals(server, speech)
    messages = asyncio.run(client_messages(wav, funasr_url(server), mode))
    assert offline_texts(messages) == expected
    assert [m["is_final"] for m in messages].count(True) == 1 and messages[-1]["is_final"]
    assert all(m["wav_name"] == "speech.wav" for m in messages)
    merged = asyncio.run(async_file_asr(wav, funasr_url(server), mode=mode))  # type: ignore[arg-type]
    assert merged["text"] == "".join(expected)
    # Timestamps are on the stream's clock, inside their utterance, in order.
    results = [m for m in messages if m["text"] and m["mode"] == "2pass-offline"]
    for m in results:
        assert all(m["start_ms"] <= a <= b <= m["end_ms"] for a, b in m["timestamp"])
    stamps = merged.get("timestamp", [])
    assert stamps == sorted(stamps) and len(stamps) == sum(len(m["timestamp"]) for m in results)


def test_8khz_audio_is_resampled_as_v1_does(
    server: ServerProcess, speech: np.ndarray, tmp_path: Path
) -> None:
    narrow = quantized(soxr.resample(speech, SR, 8000))
    wav = write_wav(tmp_path / "narrow.wav", narrow, 8000)
    messages = asyncio.run(client_messages(wav, funasr_url(server), "offline"))
    assert offline_texts(messages) == v1_finals(server, narrow, rate=8000)


@dataclass
class Html5Run:
    messages: list[dict[str, Any]] = field(default_factory=list)
    subprotocol: str | None = None
    open_after_final: bool = False
    close_code: int | None = None


async def html5_file_session(url: str, wav: bytes) -> Html5Run:
    """FunASR's html5 page in file mode: the whole .wav as "PCM" in 960-byte frames."""
    run = Html5Run()
    async with connect(url) as ws:
        first = {"mode": "offline", "wav_format": "PCM", "audio_fs": SR, "wav_name": "h5"}
        await ws.send(json.dumps({**first, "chunk_size": [5, 10, 5], "is_speaking": True}))
        for frame in chunks(wav, 960):
            await ws.send(frame)
        await ws.send(json.dumps({"wav_name": "h5", "is_speaking": False, "mode": "offline"}))
        while not run.messages or not run.messages[-1]["is_final"]:
            run.messages.append(json.loads(await ws.recv()))
        await asyncio.sleep(0.3)
        run.open_after_final = ws.state is State.OPEN
        # funasr-client sends its end marker again as it closes: that must not fail.
        await ws.send(json.dumps({"is_speaking": False}))
        run.subprotocol = ws.subprotocol
    run.close_code = ws.close_code
    return run


def test_a_whole_wav_file_sent_as_pcm_has_its_header_stripped(
    server: ServerProcess, speech: np.ndarray, tmp_path: Path
) -> None:
    wav = write_wav(tmp_path / "h5.wav", speech, SR).read_bytes()
    run = asyncio.run(html5_file_session(funasr_url(server), wav))
    assert offline_texts(run.messages) == v1_finals(server, speech)
    assert run.subprotocol is None  # the browser offers none, so none is selected
    # As the reference servers do, the server leaves the close to its client after a
    # normal end (FunASR's clients fail if it closes first).
    assert run.open_after_final and run.close_code == 1000


async def bad_config_session(url: str) -> tuple[list[dict[str, Any]], str | None, int | None]:
    async with connect(url, subprotocols=["binary"]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"mode": "2pass", "audio_fs": 12345, "wav_name": "bad"}))
        messages: list[dict[str, Any]] = []
        with contextlib.suppress(ConnectionClosed):  # an error close raises at the end
            async for message in ws:
                messages.append(json.loads(message))
    return messages, ws.subprotocol, ws.close_code


def test_a_bad_config_gets_an_error_message_the_end_and_a_close(server: ServerProcess) -> None:
    messages, subprotocol, close_code = asyncio.run(bad_config_session(funasr_url(server)))
    assert subprotocol == "binary"  # FunASR's clients offer it; the reference selects it
    error, end = messages
    assert error["error"]["code"] == "invalid_field" and "audio_fs" in error["error"]["message"]
    assert (error["mode"], error["wav_name"], error["is_final"]) == ("2pass-offline", "bad", False)
    assert end["is_end"] and not end["is_final"] and "audio_fs" in end["error"]
    assert (end["mode"], end["wav_name"]) == ("2pass", "bad")
    assert close_code == 1008


@dataclass
class UpstreamRun:
    """What a client that behaves like FunASR's funasr_wss_client.py saw."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    subprotocol: str | None = None
    close_code: int | None = None

    @property
    def acknowledgement(self) -> dict[str, Any]:
        (ack,) = [m for m in self.messages if m.get("is_end")]
        return ack

    def texts(self, mode: str) -> list[str]:
        return [m["text"] for m in self.messages if m["mode"] == mode and m["text"]]


async def upstream_client(url: str, pcm: bytes, mode: str, itn: bool) -> UpstreamRun:
    """As upstream's client runs with `--ssl 0`: ws://HOST:PORT with no path, its config
    (Paraformer's `itn`), 60 ms PCM chunks, then `is_end`, then it waits for the
    acknowledgement (a message with `is_end`) and closes itself."""
    run = UpstreamRun()
    first = {
        "mode": mode,
        "chunk_size": [5, 10, 5],
        "chunk_interval": 10,
        "encoder_chunk_look_back": 4,
        "decoder_chunk_look_back": 0,
        "audio_fs": SR,
        "wav_name": "demo",
        "wav_format": "pcm",
        "is_speaking": True,
        "hotwords": "",
        "itn": itn,
    }
    async with connect(url, subprotocols=["binary"], ping_interval=None) as ws:  # type: ignore[list-item]
        run.subprotocol = ws.subprotocol
        await ws.send(json.dumps(first))
        for piece in chunks(pcm, 1920):
            await ws.send(piece)
        await ws.send(json.dumps({"is_speaking": False, "is_end": True}))
        while not any(m.get("is_end") for m in run.messages):
            run.messages.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
    run.close_code = ws.close_code
    return run


def root_url(server: ServerProcess) -> str:
    return f"ws://127.0.0.1:{server.port}"


@pytest.mark.parametrize("mode", ["offline", "2pass", "online"])
def test_upstreams_client_at_the_root_path_ends_with_an_acknowledgement(
    server: ServerProcess, speech: np.ndarray, mode: str
) -> None:
    run = asyncio.run(upstream_client(root_url(server), to_s16le(speech), mode, itn=True))
    assert run.subprotocol == "binary"
    ack = run.acknowledgement
    assert ack == {"mode": mode, "text": "", "wav_name": "demo", "is_final": True, "is_end": True}
    assert run.messages[-1] is ack and run.close_code == 1000  # the client closed, cleanly
    if mode == "online":
        # The screen ends with each utterance's final text, and never shows anything else.
        assert run.texts("2pass-online") == v1_finals(server, speech)
    else:
        assert run.texts("2pass-offline") == v1_finals(server, speech)


def test_upstreams_itn_flag_is_obeyed(server: ServerProcess, speech: np.ndarray) -> None:
    plain = asyncio.run(upstream_client(root_url(server), to_s16le(speech), "offline", itn=False))
    start = {"type": "start", "pace": "replay", "itn": False}
    outcome = asyncio.run(run_session(server.url, to_s16le(speech), start=start, linger=60))
    expected = [str(e["text"]) for e in outcome.of("final")]
    assert plain.texts("2pass-offline") == expected
    # The random test model answers a different prompt differently: ITN was really off.
    assert expected != v1_finals(server, speech)


def test_a_tls_client_on_the_plain_port_is_named_in_the_log(server: ServerProcess) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        pytest.raises((ssl.SSLError, OSError)),
    ):
        context.wrap_socket(raw, server_hostname="127.0.0.1")
    server.wait_for(r"a TLS client connected to a plain ws:// port from 127\.0\.0\.1:\d+")
    assert not any("Invalid HTTP request" in line for line in server.log)
