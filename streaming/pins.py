"""Pins: options a session's credential fixes (a client secret's), whatever its client asks.

A pinned language or hotword list replaces the one a `Configure` names, so the stream's
`Configured` reports the pinned value; a pinned audio format is not replaced (the client's
bytes are in the format it said) but refused when a `Configure` names another one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine.types import Hotword
from streaming.audio.decoder import AudioFormat
from streaming.commands import CLIENT_LANGUAGES, Configure
from streaming.errors import InvalidFieldError


@dataclass(frozen=True, slots=True)
class Pins:
    """What a session's credential fixes; None leaves that choice to the client."""

    language: str | None = None
    hotwords: tuple[Hotword, ...] | None = None
    encoding: str | None = None
    sample_rate: int | None = None

    def __post_init__(self) -> None:
        if self.language is not None and self.language not in CLIENT_LANGUAGES:
            raise InvalidFieldError(f"a pinned language must be one of {CLIENT_LANGUAGES}")
        _format(self.encoding, self.sample_rate)  # one the decoder does not take is refused

    @property
    def audio(self) -> AudioFormat:
        """The pinned format (the defaults for what is not pinned): audio alone means it."""
        return _format(self.encoding, self.sample_rate)

    def check(self, audio: AudioFormat) -> None:
        """Raise an InvalidFieldError when `audio` is not the pinned format (channels are
        the client's: a multichannel stream's channels are each checked as mono)."""
        wrong_encoding = self.encoding is not None and audio.encoding != self.encoding
        wrong_rate = self.sample_rate is not None and audio.sample_rate != self.sample_rate
        if wrong_encoding or wrong_rate:
            raise InvalidFieldError(
                f"this session's credential fixes the audio format to {self.shown_format}; "
                f"got {audio.encoding} at {audio.sample_rate} Hz"
            )

    @property
    def shown_format(self) -> str:
        """The pinned format in words, for errors."""
        encoding = self.encoding or "any encoding"
        return f"{encoding} at {self.sample_rate} Hz" if self.sample_rate else encoding

    def apply(self, command: Configure) -> Configure:
        """`command` with the pinned options in place of its own; raises InvalidFieldError
        when it names another audio format."""
        self.check(command.audio)
        options = command.options
        if self.language is not None:
            options = replace(options, language=self.language)
        if self.hotwords is not None:
            options = replace(options, hotwords=self.hotwords)
        return replace(command, options=options)


def _format(encoding: str | None, sample_rate: int | None) -> AudioFormat:
    default = AudioFormat()
    return AudioFormat(encoding or default.encoding, sample_rate or default.sample_rate)
