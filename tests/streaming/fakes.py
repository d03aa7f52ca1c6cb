"""Small real implementations for sans-I/O tests: an energy VAD and a deterministic engine."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.types import InferenceRequest, InferenceResult, RequestKind, Token, Transcript
from streaming.errors import ProtocolError
from streaming.limits import SessionLimits
from streaming.protocols.v1.codec import V1Codec
from streaming.session import Session
from streaming.vad.types import BlockVerdict, VadConfig, VadEvent, VadEventKind, accept_each
from tests.speech import to_s16le

FRAME = 160  # 10 ms at 16 kHz


def tone_bursts(
    spans_s: list[tuple[float, float]], total_s: float, rate: int = 16000
) -> np.ndarray:
    """A 300 Hz tone inside each span, digital silence elsewhere: exact speech regions."""
    audio = np.zeros(int(total_s * rate), np.float32)
    for a, b in spans_s:
        t = np.arange(int(a * rate), min(int(b * rate), len(audio)))
        audio[t] = 0.3 * np.sin(2 * np.pi * 300 * t / rate)
    return audio


def stereo(left: np.ndarray, right: np.ndarray) -> bytes:
    """Interleaved s16le frames: left, right, left, right, …"""
    pairs = np.stack([np.frombuffer(to_s16le(x), "<i2") for x in (left, right)], axis=1)
    return pairs.astype("<i2").tobytes()


class EnergyVadStream:
    """Speech while 10 ms frames are above `threshold` RMS; ends after the end silence."""

    def __init__(self, config: VadConfig, threshold: float) -> None:
        self._threshold = threshold
        self._hang = config.end_silence_ms // 10
        self._pending = np.zeros(0, np.float32)
        self._pos = 0
        self._in_speech = False
        self._silent = 0
        self._last_voiced_end = 0

    def accept(self, samples: np.ndarray) -> list[VadEvent]:
        data = np.concatenate((self._pending, samples))
        whole = len(data) // FRAME * FRAME
        self._pending = data[whole:]
        events: list[VadEvent] = []
        for frame in data[:whole].reshape(-1, FRAME):
            voiced = float(np.sqrt(np.mean(frame * frame))) > self._threshold
            self._step(voiced, events)
            self._pos += FRAME
        return events

    def _step(self, voiced: bool, events: list[VadEvent]) -> None:
        if voiced:
            if not self._in_speech:
                events.append(VadEvent(VadEventKind.SPEECH_START, self._pos))
                self._in_speech = True
            self._silent = 0
            self._last_voiced_end = self._pos + FRAME
        elif self._in_speech:
            self._silent += 1
            if self._silent >= self._hang:
                events.append(VadEvent(VadEventKind.SPEECH_END, self._last_voiced_end))
                self._in_speech = False

    def accept_blocks(self, blocks: Sequence[np.ndarray]) -> list[BlockVerdict]:
        return accept_each(self, blocks)

    def pending_end(self) -> int | None:
        return self._last_voiced_end if self._in_speech and self._silent > 0 else None

    def flush(self) -> list[VadEvent]:
        self._pos += len(self._pending)
        self._pending = np.zeros(0, np.float32)
        if self._in_speech:
            self._in_speech = False
            return [VadEvent(VadEventKind.SPEECH_END, self._pos)]
        return []


class EnergyVadModel:
    """Makes EnergyVadStreams; a stand-in for FSMN where the model is not the point."""

    name = "energy"

    def __init__(self, threshold: float = 0.01) -> None:
        self._threshold = threshold

    def new_stream(self, config: VadConfig) -> EnergyVadStream:
        return EnergyVadStream(config, self._threshold)


def fake_transcript(request: InferenceRequest) -> Transcript:
    """Text that identifies exactly which audio was decoded, with one timed token."""
    digest = hashlib.sha1(request.audio.tobytes()).hexdigest()[:8]
    text = f"u{request.utterance_id} n{request.num_samples} {digest}"
    duration_ms = request.num_samples * 1000 // 16000
    token = Token(1, text, 0, duration_ms)
    return Transcript(text, "en", "neutral", "speech", request.options.itn, text, (token,))


def final_requests(requests: list[InferenceRequest]) -> list[InferenceRequest]:
    """Per utterance, the decode whose answer is its final: the FINAL one, else the last EARLY.

    An early decode becomes the final when the pause it was sent in lasted; then the
    session sends no FINAL for that utterance.
    """
    chosen: dict[int, InferenceRequest] = {}
    for r in requests:
        if r.kind is RequestKind.FINAL or (
            r.kind is RequestKind.EARLY
            and chosen.get(r.utterance_id, r).kind is not RequestKind.FINAL
        ):
            chosen[r.utterance_id] = r
    return [chosen[k] for k in sorted(chosen)]


def answer(request: InferenceRequest) -> InferenceResult:
    return InferenceResult(request.ref, fake_transcript(request))


WORD_MS = 300  # the word fake's pitch: one word per 300 ms of stream time


def word_transcript(request: InferenceRequest) -> Transcript:
    """A consistent decoder: word k fills stream ms [300k + 50, 300k + 250).

    A decode shows each word that lies wholly inside its audio, timed on the request's
    clock, so any window of the stream yields exactly the words of that window.
    """
    begin_ms = request.start_sample * 1000 // 16000
    end_ms = begin_ms + request.num_samples * 1000 // 16000
    tokens = []
    for k in range(max(0, begin_ms // WORD_MS), end_ms // WORD_MS + 1):
        start, stop = k * WORD_MS + 50, k * WORD_MS + 250
        if begin_ms <= start and stop <= end_ms:
            tokens.append(Token(k, f" w{k}", start - begin_ms, stop - begin_ms))
    text = "".join(t.text for t in tokens).strip()
    return Transcript(text, "en", "neutral", "speech", request.options.itn, text, tuple(tokens))


def words_between(begin_ms: int, end_ms: int) -> str:
    """What a whole decode of stream ms [begin_ms, end_ms) says under `word_transcript`."""
    ks = [k for k in range(end_ms // WORD_MS + 1) if begin_ms <= k * WORD_MS + 50]
    return " ".join(f"w{k}" for k in ks if k * WORD_MS + 250 <= end_ms)


class V1Session:
    """A Session driven through the real protocol v1 codec, as one connection drives it.

    Streaming tests speak v1 text and bytes; what a codec adds (its frame limits, the
    start-once rule, close codes) is then part of what they check.
    """

    def __init__(self, session: Session, limits: SessionLimits | None = None) -> None:
        self.session = session
        self.codec = V1Codec(limits or SessionLimits())
        self.close_code: int | None = None

    def receive_text(self, text: str, now: float) -> None:
        for command in self.codec.decode(text):
            self.session.handle(command, now)

    def receive_audio(self, data: bytes, now: float) -> None:
        for command in self.codec.decode(data):
            self.session.handle(command, now)

    def abort(self, error: ProtocolError, now: float) -> None:
        if self.close_code is None:
            self.close_code = self.codec.close_code(error)
        self.session.abort(error, now)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)
