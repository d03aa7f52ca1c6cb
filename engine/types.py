"""Plain data types shared by the engine and its callers (streaming imports only this)."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Language prompts the model accepts, in the order of its prompt-embedding table.
LANGUAGES: tuple[str, ...] = ("auto", "zh", "en", "yue", "ja", "ko", "nospeech")

#: Milliseconds of audio covered by one encoder frame (LFR 6 x 10 ms shift).
FRAME_MS = 60

SAMPLE_RATE = 16000


#: Hotword limits: a session's phrases, the characters of one phrase, the boost's range.
MAX_HOTWORDS = 1000
MAX_HOTWORD_CHARS = 64
DEFAULT_HOTWORD_BOOST = 2.0
MAX_HOTWORD_BOOST = 10.0


@dataclass(frozen=True, slots=True)
class Hotword:
    """A phrase to favour in decoding, and the log-probability bonus per token it earns."""

    phrase: str
    boost: float = DEFAULT_HOTWORD_BOOST

    def __post_init__(self) -> None:
        text = self.phrase.strip()
        if not text or len(text) > MAX_HOTWORD_CHARS:
            raise ValueError(
                f"a hotword must have 1 to {MAX_HOTWORD_CHARS} characters; got {self.phrase!r}"
            )
        if not 0.0 < self.boost <= MAX_HOTWORD_BOOST:
            raise ValueError(
                f"a hotword's boost must be within (0, {MAX_HOTWORD_BOOST}]; got {self.boost}"
            )


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    """Per-request prompts: language (or auto) and inverse text normalisation, and the
    hotwords its decoding favours (none: greedy decoding); `speaker`: also embed who is
    speaking (engine.speakers), for speaker labels; `confidence`: also give each token
    its log-probability and the utterance its chance of no speech (engine.decoding.confidence),
    when the backend can score."""

    language: str = "auto"
    itn: bool = True
    hotwords: tuple[Hotword, ...] = ()
    speaker: bool = False
    confidence: bool = False

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            raise ValueError(
                f"language must be one of {', '.join(LANGUAGES)}; got {self.language!r}"
            )
        if len(self.hotwords) > MAX_HOTWORDS:
            raise ValueError(f"at most {MAX_HOTWORDS} hotwords; got {len(self.hotwords)}")


@dataclass(frozen=True, slots=True)
class Token:
    """One decoded text token with its time span on the utterance's clock, and its
    log-probability (natural log, at most 0) when confidence was asked for and scored."""

    id: int
    text: str
    start_ms: int
    end_ms: int
    logprob: float | None = None

    @property
    def confidence(self) -> float | None:
        """The token's probability, from 0 to 1 (None when not scored)."""
        return None if self.logprob is None else math.exp(self.logprob)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"text": self.text, "start_ms": self.start_ms, "end_ms": self.end_ms}
        if self.logprob is not None:
            out["logprob"] = self.logprob
        return out


@dataclass(frozen=True, slots=True)
class Transcript:
    """A rich transcript: plain text, tags, timed tokens and funasr-style rich text, and,
    when confidence was scored, the chance that the audio held no speech."""

    text: str
    lang: str
    emotion: str
    event: str
    itn: bool
    rich_text: str
    tokens: tuple[Token, ...] = field(default_factory=tuple)
    no_speech_prob: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "lang": self.lang,
            "emotion": self.emotion,
            "event": self.event,
            "itn": self.itn,
            "rich_text": self.rich_text,
            "tokens": [t.to_dict() for t in self.tokens],
        } | ({} if self.no_speech_prob is None else {"no_speech_prob": self.no_speech_prob})


class RequestKind(enum.Enum):
    """A partial is a provisional decode of speech so far; a final closes an utterance.

    An early decode covers the utterance up to where a pause began, sent before the VAD
    has decided; it is the final when the pause lasts, so it queues like one.
    """

    PARTIAL = "partial"
    FINAL = "final"
    EARLY = "early"
    # A whole file's utterance: decoded only when no live request waits.
    BACKGROUND = "background"

    @property
    def urgent(self) -> bool:
        """Queued ahead of partials, never dropped or replaced."""
        return self in (RequestKind.FINAL, RequestKind.EARLY)


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    """One utterance (or its prefix) for the engine to decode.

    `audio` is float32 16 kHz mono; `start_sample` is its offset on the session's stream
    clock, so results can be placed in time. `arrival` is the caller's `now` in seconds.
    `request_id` is unique within the session: results are matched by (session, request
    id), never by object identity, so an answer may come back as a copy (from another
    process or host) and still find its request.
    """

    session_id: str
    utterance_id: int
    kind: RequestKind
    audio: np.ndarray
    options: DecodeOptions
    arrival: float
    start_sample: int = 0
    request_id: int = 0
    # Sent faster than real time (a replay): queued behind live requests of its urgency,
    # so a fast sender's utterances fill batches without delaying a live stream's.
    bulk: bool = False

    @property
    def key(self) -> tuple[str, int]:
        return (self.session_id, self.utterance_id)

    @property
    def num_samples(self) -> int:
        return int(self.audio.shape[0])

    @property
    def ref(self) -> RequestRef:
        return RequestRef(
            self.session_id,
            self.request_id,
            self.utterance_id,
            self.kind,
            self.start_sample,
            self.num_samples,
        )


@dataclass(frozen=True, slots=True)
class RequestRef:
    """Which request a result answers, and where its audio lay, without the audio itself:
    what travels back from an engine in another process is this, not the request."""

    session_id: str
    request_id: int
    utterance_id: int
    kind: RequestKind
    start_sample: int
    num_samples: int


@dataclass(frozen=True, slots=True)
class InferenceResult:
    """The engine's answer to one request: a transcript, or a typed error code and message;
    with `DecodeOptions.speaker`, the speaker's embedding (a 256-d float32 unit vector)."""

    ref: RequestRef
    transcript: Transcript | None = None
    error_code: str | None = None
    error_message: str | None = None
    speaker: np.ndarray | None = None

    @property
    def ok(self) -> bool:
        return self.transcript is not None
