"""Plain data types shared by the engine and its callers (streaming imports only this)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Language prompts the model accepts, in the order of its prompt-embedding table.
LANGUAGES: tuple[str, ...] = ("auto", "zh", "en", "yue", "ja", "ko", "nospeech")

#: Milliseconds of audio covered by one encoder frame (LFR 6 x 10 ms shift).
FRAME_MS = 60

SAMPLE_RATE = 16000


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    """Per-request prompts: language (or auto) and inverse text normalisation."""

    language: str = "auto"
    itn: bool = True

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            raise ValueError(
                f"language must be one of {', '.join(LANGUAGES)}; got {self.language!r}"
            )


@dataclass(frozen=True, slots=True)
class Token:
    """One decoded text token with its time span on the utterance's clock."""

    id: int
    text: str
    start_ms: int
    end_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "start_ms": self.start_ms, "end_ms": self.end_ms}


@dataclass(frozen=True, slots=True)
class Transcript:
    """A rich transcript: plain text, tags, timed tokens and funasr-style rich text."""

    text: str
    lang: str
    emotion: str
    event: str
    itn: bool
    rich_text: str
    tokens: tuple[Token, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "lang": self.lang,
            "emotion": self.emotion,
            "event": self.event,
            "itn": self.itn,
            "rich_text": self.rich_text,
            "tokens": [t.to_dict() for t in self.tokens],
        }
