"""Neutral commands: what every wire protocol's codec turns its client messages into.

The session core takes only these; a protocol adds a codec, never session logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.types import LANGUAGES
from streaming.audio import AudioFormat
from streaming.errors import InvalidFieldError

#: Languages a client may ask for (nospeech is a model prompt, not a language).
CLIENT_LANGUAGES = LANGUAGES[:-1]
PACES = ("live", "replay")


@dataclass(frozen=True, slots=True)
class TurnDetection:
    """How utterances end: the server's VAD (with optional overrides), or client commits."""

    vad: bool = True
    end_silence_ms: int | None = None  # None: the server's setting
    preroll_ms: int | None = None

    def __post_init__(self) -> None:
        if self.end_silence_ms is not None and not 50 <= self.end_silence_ms <= 10_000:
            raise InvalidFieldError("silence duration must be within 50..10000 ms")
        if self.preroll_ms is not None and not 0 <= self.preroll_ms <= 2000:
            raise InvalidFieldError("prefix padding must be within 0..2000 ms")


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """Decoding and reporting choices a client may make for its stream."""

    language: str = "auto"
    itn: bool = True
    partials: bool = True
    emotion: bool = True
    event: bool = True
    timestamps: bool = True
    pace: str = "live"  # a live client is held to real time; a replay may go much faster
    turns: TurnDetection = field(default_factory=TurnDetection)
    # Accepted and reported back, but not yet used in decoding (no biasing exists yet).
    hotwords: tuple[str, ...] = ()
    prompt: str = ""

    def __post_init__(self) -> None:
        if self.language not in CLIENT_LANGUAGES:
            allowed = ", ".join(CLIENT_LANGUAGES)
            raise InvalidFieldError(f"language must be one of {allowed}; got {self.language!r}")
        if self.pace not in PACES:
            raise InvalidFieldError(f"pace must be live or replay; got {self.pace!r}")


@dataclass(frozen=True, slots=True)
class Configure:
    """Set the audio format and options. Once audio has flowed only the options may change."""

    audio: AudioFormat = field(default_factory=AudioFormat)
    options: StreamOptions = field(default_factory=StreamOptions)


@dataclass(frozen=True, slots=True)
class Audio:
    """Audio bytes in the configured wire format."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Commit:
    """End the current utterance now (a client's turn detection)."""


@dataclass(frozen=True, slots=True)
class Clear:
    """Drop the audio of the current utterance without decoding it."""


@dataclass(frozen=True, slots=True)
class Stop:
    """No more audio: owed finals, then `Ended`."""


Command = Configure | Audio | Commit | Clear | Stop
