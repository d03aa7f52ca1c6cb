"""One client per way into the server, each sending a file as its protocol's callers do
and returning the plain text of the finals it got back, joined by spaces.

Live protocols are paced at real time in their own frame sizes (v1 and OpenAI 100 ms,
FunASR's microphone client 60 ms, Twilio 20 ms, AudioHook 100 ms); the file API, which
has no live mode, posts the whole file. Every client asks for English with ITN on, the
settings of the offline decode they are compared with.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import soundfile as sf
import soxr
from funasr_client import async_funasr_client
from openai import AsyncOpenAI

from sensestream.client import SessionOptions, converse, pcm16, split
from tests.accuracy.corpus import SR, AudioFile
from tests.callcentre.audiohook_emulator import AudioHookCall
from tests.callcentre.audiohook_emulator import play as play_audiohook
from tests.callcentre.subscriber import follow
from tests.callcentre.twilio_emulator import TwilioCall, play_call
from tools.g711 import encode_mulaw

LANGUAGE = "en"
REALTIME_RATE = 24000
COMPLETED = "conversation.item.input_audio_transcription.completed"
FAILED = "conversation.item.input_audio_transcription.failed"
#: How long after its audio a path may take to deliver its last final.
DRAIN_S = 60.0


@dataclass(frozen=True)
class Server:
    host: str  # 127.0.0.1:PORT

    def ws(self, path: str) -> str:
        return f"ws://{self.host}{path}"

    def openai(self) -> AsyncOpenAI:
        return AsyncOpenAI(
            api_key="EMPTY",
            base_url=f"http://{self.host}/v1",
            websocket_base_url=f"ws://{self.host}/v1",
            max_retries=0,
        )


Driver = Callable[[Server, AudioFile], Awaitable[str]]


def joined(texts: list[str]) -> str:
    return " ".join(t.strip() for t in texts if t.strip())


def mulaw_8k(audio: np.ndarray) -> bytes:
    return encode_mulaw(soxr.resample(audio, SR, 8000))


async def v1(
    server: Server, file: AudioFile, start: dict[str, Any], data: bytes, bytes_per_s: int
) -> str:
    """`data` (bytes_per_s of it a second) in 100 ms frames at real time."""
    options = SessionOptions(start=start, frame_s=0.1, speed=1.0, drain_timeout_s=DRAIN_S)
    outcome = await converse(server.ws("/ws"), split(data, bytes_per_s // 10), options)
    assert outcome.ended, f"v1 session of {file.name} got no end: {outcome.events[-3:]}"
    return joined([e["text"] for e in outcome.of("final")])


async def v1_16k(server: Server, file: AudioFile) -> str:
    start = {"type": "start", "sample_rate": SR, "language": LANGUAGE}
    return await v1(server, file, start, pcm16(file.audio), 2 * SR)


async def v1_mulaw(server: Server, file: AudioFile) -> str:
    start = {"type": "start", "sample_rate": 8000, "encoding": "mulaw", "language": LANGUAGE}
    return await v1(server, file, start, mulaw_8k(file.audio), 8000)


async def funasr(server: Server, file: AudioFile) -> str:
    """FunASR's 2pass microphone client: 60 ms chunks at real time, then its end marker."""
    messages: list[Any] = []
    client = async_funasr_client(
        server.ws("/funasr"),
        mode="2pass",
        wav_name=file.name,
        audio_fs=SR,
        svs_lang=LANGUAGE,
        svs_itn=True,
        callback=messages.append,
        decode=False,
    )
    chunk_s = 0.06
    async with client:
        await paced(split(pcm16(file.audio), round(2 * SR * chunk_s)), chunk_s, client.send)
        await client.close(timeout=DRAIN_S)
    assert messages and messages[-1]["is_final"], f"FunASR {file.name}: no final message"
    return joined([m["text"] for m in messages if m["mode"] == "2pass-offline"])


async def paced(
    frames: list[bytes], frame_s: float, send: Callable[[bytes], Awaitable[Any]]
) -> None:
    """Send each frame when its audio would have been spoken, from the first one's time."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    for i, frame in enumerate(frames):
        await asyncio.sleep(max(0.0, t0 + i * frame_s - loop.time()))
        await send(frame)


async def openai_realtime(server: Server, file: AudioFile) -> str:
    """The SDK's GA transcription session, server VAD on, pcm16 at 24 kHz in 100 ms pieces."""
    data = pcm16(soxr.resample(file.audio, SR, REALTIME_RATE))
    session: Any = {
        "type": "transcription",
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": REALTIME_RATE},
                "transcription": {"model": "whisper-1", "language": LANGUAGE},
            }
        },
    }
    async with server.openai().realtime.connect(extra_query={"intent": "transcription"}) as conn:
        await conn.session.update(session=session)

        async def append(piece: bytes) -> None:
            await conn.input_audio_buffer.append(audio=base64.b64encode(piece).decode())

        sender = asyncio.create_task(paced(split(data, 2 * REALTIME_RATE // 10), 0.1, append))
        events = await asyncio.wait_for(
            realtime_events(conn, sender, session), file.seconds + DRAIN_S
        )
    errors = [e for e in events if e.type in ("error", FAILED)]
    assert not errors, f"OpenAI Realtime {file.name}: {errors}"
    return joined([e.transcript for e in events if e.type == COMPLETED])


async def realtime_events(conn: Any, sender: asyncio.Task[None], session: Any) -> list[Any]:
    """Every event until each committed item has its transcript.

    Once the audio is sent, the same `session.update` again is a marker: its
    `session.updated` comes after every event of the audio before it, so the items
    committed by then are all there will be.
    """

    async def mark() -> None:
        await sender
        await conn.session.update(session=session)

    marker = asyncio.create_task(mark())
    events: list[Any] = []
    try:
        async for event in conn:
            events.append(event)
            updates = sum(e.type == "session.updated" for e in events)
            committed = sum(e.type == "input_audio_buffer.committed" for e in events)
            answered = sum(e.type in (COMPLETED, FAILED) for e in events)
            if updates >= 2 and answered >= committed:
                await marker
                return events
    finally:
        marker.cancel()
    raise AssertionError(f"the Realtime session closed early: {events[-3:]}")


async def twilio(server: Server, file: AudioFile) -> str:
    """One inbound track, 20 ms frames at real time with network jitter; read by a
    subscriber of the call's stream, as Twilio itself reads nothing back."""
    call_sid = "CA" + hashlib.sha1(file.name.encode()).hexdigest()[:32]
    call = TwilioCall(mulaw_8k(file.audio), None, call_sid, {"language": LANGUAGE})
    follower = asyncio.create_task(follow(server.ws("/ws"), call_sid))
    played = await play_call(server.ws("/twilio"), call, speed=1.0, close_after_stop=True)
    followed = await asyncio.wait_for(follower, DRAIN_S)
    assert followed.of("end"), f"Twilio {file.name}: the subscriber got no end ({played})"
    return joined([e["text"] for e in followed.of("final")])


async def audiohook(server: Server, file: AudioFile) -> str:
    """A mono (customer-only) Genesys AudioHook call; its transcripts come back in-band."""
    call = AudioHookCall(
        mulaw_8k(file.audio), str(uuid.uuid4()), channels=("external",), language="en-US"
    )
    run = await play_audiohook(server.ws("/audiohook"), call)
    assert run.closed and not run.problems, f"AudioHook {file.name}: {run.problems}"
    texts = [t["alternatives"][0]["interpretations"][0]["transcript"] for t in run.transcripts()]
    return joined(texts)


async def file_api(server: Server, file: AudioFile) -> str:
    """OpenAI's file API: the whole file in one POST (it has no live mode)."""
    wav = io.BytesIO()
    sf.write(wav, np.frombuffer(pcm16(file.audio), "<i2"), SR, format="WAV", subtype="PCM_16")
    result = await server.openai().audio.transcriptions.create(
        file=(f"{file.name}.wav", wav.getvalue()), model="whisper-1", language=LANGUAGE
    )
    return str(result.text)


#: Every way in: the 16 kHz ones are held to the offline decode, the 8 kHz μ-law ones to
#: v1 at 16 kHz.
WIDEBAND: dict[str, Driver] = {
    "v1-16k": v1_16k,
    "funasr": funasr,
    "openai-realtime-pcm16": openai_realtime,
    "file-api": file_api,
}
NARROWBAND: dict[str, Driver] = {
    "v1-mulaw": v1_mulaw,
    "twilio": twilio,
    "audiohook": audiohook,
}
DRIVERS: dict[str, Driver] = {**WIDEBAND, **NARROWBAND}


async def hypotheses(server: Server, files: list[AudioFile]) -> dict[str, list[str] | Exception]:
    """Every file through every path at once: real-time pacing is paid for once.

    A path whose client failed gets its exception instead, so only its own test fails.
    """
    runs = [(name, drive(server, f)) for name, drive in DRIVERS.items() for f in files]
    results = await asyncio.gather(*(run for _, run in runs), return_exceptions=True)
    out: dict[str, list[str] | Exception] = {name: [] for name in DRIVERS}
    for (name, _), result in zip(runs, results, strict=True):
        texts = out[name]
        if isinstance(result, BaseException) and not isinstance(result, Exception):
            raise result  # a cancellation or an interrupt is not a path's failure
        if isinstance(texts, list):
            out[name] = result if isinstance(result, Exception) else [*texts, result]
    return out
