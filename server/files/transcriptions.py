"""Whole-file transcription through the same session core and engine as live streams.

An upload is decoded in a worker thread, fed to an ordinary `Session` (VAD cuts it into
utterances), and its finals are decoded by the shared engine as background requests,
which only run when no live partial or final waits. Feeding stops while a few finals are
owed (the session's backpressure, as for live clients), so a long recording holds little
memory and never floods the queue.
"""

from __future__ import annotations

import asyncio
import io
import logging
import threading
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import IO, Any, Protocol

import numpy as np
import soundfile as sf
import soxr

from engine.client import EngineClient
from engine.errors import HotwordError
from engine.types import SAMPLE_RATE, DecodeOptions, InferenceRequest, InferenceResult, RequestKind
from server.files.mpeg import ChildDecoder, DecodeError, is_mpeg, reason
from streaming.audio.decoder import AudioFormat
from streaming.commands import (
    Audio,
    Configure,
    Stop,
    StreamOptions,
    hotwords_from,
    prompt_keywords,
)
from streaming.errors import UnsupportedHotwordError
from streaming.events import Ended, Failed, Final
from streaming.protocols.openai.files import FileApiError, TranscriptionJob
from streaming.session import Session, SessionConfig
from streaming.speakers.offline import KnownSpeaker, relabel
from streaming.vad.types import VadModel

log = logging.getLogger("sensestream.transcriptions")

CHUNK_S = 2.0  # audio handed to the session per step
REFERENCE_MIN_S, REFERENCE_MAX_S = 2.0, 10.0  # a known speaker's clip
UNKNOWN_FRAMES = 2**63 - 1  # libsndfile's SF_COUNT_MAX


@dataclass(frozen=True, slots=True)
class AudioInfo:
    duration_s: float
    sample_rate: int
    channels: int


class AudioSource(Protocol):
    """What FileAudio reads through: a `soundfile.SoundFile`, or a `ChildDecoder`."""

    samplerate: int
    channels: int
    frames: int
    closed: bool

    def read(self, frames: int, dtype: str, always_2d: bool) -> np.ndarray: ...
    def close(self) -> None: ...


def open_audio(file: IO[bytes], name: str) -> AudioSource:
    """A reader for the upload (mp3 in a child process, see `server.files.mpeg`); errors
    quote `name`, the form's filename, never the spooled file object."""
    head = file.read(4)
    file.seek(0)
    try:
        if is_mpeg(head):
            return ChildDecoder(file, name)
        source: AudioSource = sf.SoundFile(file)
        return source
    except (sf.LibsndfileError, RuntimeError, TypeError, DecodeError) as exc:
        message = f"cannot decode {name}: not an audio file ({reason(exc)})"
        raise FileApiError(415, message, "file") from exc
    except OSError as exc:  # no process to decode in: this host is out of something
        message = f"cannot decode {name} now: {exc.strerror or exc}"
        raise FileApiError(503, message, "file") from exc


class FileAudio:
    """Decodes an uploaded file to float32 16 kHz mono in chunks (libsndfile + soxr).

    Audio longer than `max_s` is refused: before decoding when the container states its
    length, else by the chunk that passes it (`FileApiError` 413 either way). Errors name
    the file by `name`.
    """

    def __init__(
        self, file: IO[bytes], max_s: float = float("inf"), name: str = "the audio file"
    ) -> None:
        self.name = name
        self._sf = open_audio(file, name)
        rate = self._sf.samplerate
        # libsndfile says SF_COUNT_MAX for a length the container leaves open (a FLAC
        # written as a stream): then only the decoded chunks count.
        frames = self._sf.frames if self._sf.frames < UNKNOWN_FRAMES else 0
        self.info = AudioInfo(frames / rate, rate, self._sf.channels)
        self._max_frames = max_s * rate
        # A read runs on a worker thread; close may come from the loop meanwhile (a client
        # gone): libsndfile must never close a file under a read.
        self._lock = threading.Lock()
        self._read_frames = 0
        self._ended = False
        self._resampler: Any = None
        if self.info.duration_s > max_s:
            self._sf.close()
            raise too_long(max_s)
        if rate != SAMPLE_RATE:
            self._resampler = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32")

    def read(self) -> np.ndarray | None:
        """The next chunk at 16 kHz, or None at the end (or once closed)."""
        with self._lock:
            if self._ended or self._sf.closed:
                return None
            frames = int(CHUNK_S * self.info.sample_rate)
            try:
                block = self._sf.read(frames, "float32", always_2d=True)
            except (sf.LibsndfileError, RuntimeError, DecodeError) as exc:
                message = f"cannot decode {self.name}: {reason(exc)}"
                raise FileApiError(415, message, "file") from exc
        self._read_frames += len(block)
        if self._read_frames > self._max_frames:  # a header that understated the length
            raise too_long(self._max_frames / self.info.sample_rate)
        last = len(block) == 0
        mono = block.mean(axis=1, dtype=np.float32) if len(block) else np.zeros(0, np.float32)
        if self._resampler is not None:
            mono = self._resampler.resample_chunk(mono, last=last)
        if last:
            self._ended = True
            return mono if len(mono) else None
        return np.ascontiguousarray(mono, dtype=np.float32)

    def close(self) -> None:
        with self._lock:
            self._sf.close()


def too_long(max_s: float) -> FileApiError:
    message = f"the audio is over this server's {max_s:g} s limit (--max-upload-seconds)"
    return FileApiError(413, message, "file", code="audio_too_long")


def reference_audio(data: bytes, index: int) -> np.ndarray:
    """A known speaker's reference clip as 16 kHz mono: 2 to 10 s of audio (as OpenAI's
    API takes), else FileApiError 400 naming it. Decoding stops past 10 s (by the
    container's stated length, else by the chunk that passes it): a few MiB of a
    well-compressed format could otherwise hold hours."""
    param = f"known_speaker_references[{index}]"
    bounds = f"{REFERENCE_MIN_S:g} to {REFERENCE_MAX_S:g} s"
    try:
        clip = FileAudio(io.BytesIO(data), REFERENCE_MAX_S, param)
    except FileApiError as exc:
        raise _reference_error(exc, param, bounds) from exc
    try:
        chunks = []
        while (chunk := clip.read()) is not None:
            chunks.append(chunk)
    except FileApiError as exc:
        raise _reference_error(exc, param, bounds) from exc
    finally:
        clip.close()
    audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    seconds = audio.size / SAMPLE_RATE
    if not REFERENCE_MIN_S <= seconds <= REFERENCE_MAX_S:
        message = f"{param} must hold {bounds} of audio; it holds {seconds:.1f} s"
        raise FileApiError(400, message, param)
    return audio


def _reference_error(exc: FileApiError, param: str, bounds: str) -> FileApiError:
    if exc.status == 413:
        return FileApiError(400, f"{param} must hold {bounds} of audio; it holds more", param)
    return FileApiError(400, f"{param} is not audio: {exc.message}", param)


def file_session_config(live: SessionConfig) -> SessionConfig:
    """The live settings, less what only live clients need: no partials, no early finals,
    no rate limit; finals queue as background work."""
    limits = replace(live.limits, max_replay_rate=1e9, max_session_s=1e9)
    # Voices are kept to the end, where a file's speakers are clustered all at once.
    return replace(live, early_final_ms=0, limits=limits, background=True, keep_voices=True)


class FileJob:
    """One upload's session: a feeder task and a results task share it under a lock."""

    def __init__(
        self, engine: EngineClient, vad: VadModel, config: SessionConfig, audio: FileAudio
    ) -> None:
        self.engine = engine
        self.audio = audio
        self.session = Session(f"file-{uuid.uuid4().hex[:12]}", file_session_config(config), vad)
        self._channel = engine.open_session(self.session.session_id)
        self._lock = asyncio.Lock()  # the session is touched by one step at a time
        self._room = asyncio.Event()  # set while the session takes more audio (`accepting`)
        self._room.set()
        self._out: asyncio.Queue[Final | Failed | Ended] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []

    def close(self) -> None:
        """Stop feeding and decoding, and forget the engine session (safe to repeat)."""
        for task in self._tasks:
            task.cancel()
        self.engine.cancel(self.session.session_id)

    async def finals(self, job: TranscriptionJob) -> AsyncIterator[Final]:
        """Yield the file's finals in order; raises FileApiError if an utterance fails."""
        options = StreamOptions(
            language=job.language,
            partials=False,
            pace="replay",
            prompt=job.prompt,
            hotwords=hotwords_from(prompt_keywords(job.prompt)),
            diarize=job.diarize,
            max_speakers=job.max_speakers,
            min_speakers=job.min_speakers,
            confidence=job.confidence,
        )
        fmt = AudioFormat("pcm_f32le", SAMPLE_RATE, 1)
        try:
            self.session.handle(Configure(fmt, options), asyncio.get_running_loop().time())
        except UnsupportedHotwordError as exc:  # the prompt's phrases: the client's
            raise FileApiError(400, exc.message, "prompt", exc.code) from exc
        feeder = asyncio.create_task(self._feed())
        collector = asyncio.create_task(self._collect())
        self._tasks = [feeder, collector]
        try:
            while True:
                event = await self._next(feeder)
                if isinstance(event, Ended):
                    return
                if isinstance(event, Failed):
                    # The prompt's phrases, where the engine refuses them (not at start).
                    if event.code == HotwordError.code:
                        raise FileApiError(400, event.message, "prompt", event.code)
                    message = f"part of the audio could not be decoded: {event.message}"
                    raise FileApiError(500, message, code=event.code)
                yield event
        finally:
            for task in (feeder, collector):
                task.cancel()
            await asyncio.gather(feeder, collector, return_exceptions=True)
            self.engine.cancel(self.session.session_id)

    async def transcript(self, job: TranscriptionJob) -> list[Final]:
        """All the file's finals; with speakers, labelled by clustering all its voices
        at the end (`streaming.speakers.offline`) rather than as they were heard, and
        named after the job's known speakers."""
        known = await self._known_speakers(job.known_speakers)
        finals = [final async for final in self.finals(job)]
        kept = self.session.kept_voices
        if not kept:
            return finals
        policy, least = self.session.speaker_policy, self.session.min_speakers
        return relabel(finals, kept, policy, least, known)

    async def _known_speakers(self, clips: Sequence[tuple[str, bytes]]) -> list[KnownSpeaker]:
        """The known speakers' reference clips, embedded by the engine (before the file)."""
        if not clips:
            return []
        now = asyncio.get_running_loop().time()
        for k, (_, data) in enumerate(clips):
            audio = await asyncio.to_thread(reference_audio, data, k)
            # Negative ids: the session never makes them, so no answer is mistaken for its.
            request = InferenceRequest(
                self.session.session_id,
                -(k + 1),
                RequestKind.BACKGROUND,
                audio,
                DecodeOptions(speaker=True),
                now,
                request_id=-(k + 1),
                bulk=True,
            )
            self.engine.submit(request)
        vectors: dict[int, np.ndarray] = {}
        while len(vectors) < len(clips):
            result = await self._channel.get()
            if result.speaker is None:
                why = result.error_message or "no speaker embedding"
                message = f"known_speaker_references could not be embedded: {why}"
                raise FileApiError(500, message, code=result.error_code)
            vectors[-result.ref.request_id - 1] = result.speaker
        return [KnownSpeaker(name, vectors[k]) for k, (name, _) in enumerate(clips)]

    async def _next(self, feeder: asyncio.Task[None]) -> Final | Failed | Ended:
        """The next event, or the feeder's error (a file that breaks while decoding)."""
        getter = asyncio.ensure_future(self._out.get())
        await asyncio.wait([getter, feeder], return_when=asyncio.FIRST_COMPLETED)
        if getter.done():
            return getter.result()
        getter.cancel()
        feeder.result()  # raises the feeder's error, if any
        return await self._out.get()

    async def _feed(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._room.wait()
            chunk = await asyncio.to_thread(self.audio.read)
            command = Stop() if chunk is None else Audio(chunk.tobytes())
            async with self._lock:
                # The VAD is CPU work: it runs off the event loop, one step at a time.
                await asyncio.to_thread(self.session.handle, command, loop.time())
                self._pump()
            if chunk is None:
                return

    async def _collect(self) -> None:
        while True:
            result: InferenceResult = await self._channel.get()
            async with self._lock:
                self.session.receive_result(result, asyncio.get_running_loop().time())
                self._pump()

    def _pump(self) -> None:
        for request in self.session.requests_to_submit():
            self.engine.submit(request)
        for event in self.session.events_to_send():
            if isinstance(event, Final | Failed | Ended):
                self._out.put_nowait(event)
        if self.session.accepting:
            self._room.set()
        else:
            self._room.clear()
