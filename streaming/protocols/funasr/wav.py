"""A RIFF/WAVE header at the start of a FunASR audio stream: parsed, then stripped.

FunASR's html5 client sends whole .wav files as "PCM", header and all, and a client that
says `wav_format: "wav"` sends one too. The header may arrive split over several frames,
so it is held until its `data` chunk begins; what follows passes straight through.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from streaming.audio.decoder import STANDARD_RATES
from streaming.errors import InvalidAudioError

#: A header longer than this (metadata chunks before `data`) is refused, so a stream
#: that is not what it claims cannot make the server hold its bytes.
MAX_HEADER_BYTES = 1 << 20
_RIFF_PREFIX = 12  # "RIFF", the size, "WAVE"
_PCM = 1
_EXTENSIBLE = 0xFFFE
# A data size a writer uses when it cannot seek back to fill in the real one.
_UNKNOWN_SIZES = (0, 0xFFFFFFFF)


@dataclass(frozen=True, slots=True)
class WavInfo:
    """What the header says about the samples that follow (16-bit PCM)."""

    sample_rate: int
    channels: int


class WavStripper:
    """Finds and strips the WAV header at the start of a stream; later bytes pass through."""

    def __init__(self, required: bool) -> None:
        self._required = required  # wav_format "wav": the stream must start with a header
        self._held = b""
        self._riff = False  # the held bytes start a RIFF/WAVE header
        self._in_body = False
        self._remaining: int | None = None  # bytes left in the data chunk, if it said

    def feed(self, data: bytes) -> tuple[WavInfo | None, bytes]:
        """The header's format once it is complete (else None), and the audio bytes to pass on."""
        if self._in_body:
            return None, self._body(data)
        self._held += data
        if not self._riff and not self._sniff():
            return None, b""  # too few bytes to tell yet
        if not self._riff:
            self._in_body = True
            audio, self._held = self._held, b""
            return None, audio
        return self._parse()

    def finish(self) -> bytes:
        """End of input: bytes held while sniffing are audio; a cut-off header is an error."""
        if self._in_body or not self._held:
            return b""
        if self._riff or self._required:
            raise InvalidAudioError("the audio ended before its WAV header was complete")
        audio, self._held = self._held, b""
        return audio

    def _sniff(self) -> bool:
        """Whether the held bytes decide it; sets `_riff` when they start a WAV header."""
        head = self._held[:_RIFF_PREFIX]
        if len(head) < _RIFF_PREFIX and b"RIFF".startswith(head[:4]):
            return False
        self._riff = head[:4] == b"RIFF" and head[8:12] == b"WAVE"
        if not self._riff and self._required:
            raise InvalidAudioError(
                'wav_format is "wav" but the audio does not start with a RIFF/WAVE header'
            )
        return True

    def _parse(self) -> tuple[WavInfo | None, bytes]:
        """Walk the chunks to `data`; wait for more bytes while the header is incomplete."""
        info: WavInfo | None = None
        pos = _RIFF_PREFIX
        held = self._held
        while len(held) >= pos + 8:
            chunk, size = held[pos : pos + 4], int.from_bytes(held[pos + 4 : pos + 8], "little")
            body = pos + 8
            if chunk == b"data":
                if info is None:
                    raise InvalidAudioError("the WAV header has no fmt chunk before its data")
                self._in_body, self._held = True, b""
                self._remaining = None if size in _UNKNOWN_SIZES else size
                return info, self._body(held[body:])
            if chunk == b"fmt ":
                if len(held) < body + size:
                    break
                info = _read_fmt(held[body : body + size])
            pos = body + size + (size & 1)  # chunks are padded to an even length
        if len(held) > MAX_HEADER_BYTES:
            raise InvalidAudioError(f"the WAV header is over {MAX_HEADER_BYTES} bytes")
        return None, b""

    def _body(self, data: bytes) -> bytes:
        """Audio bytes, cut at the end of the data chunk (trailing metadata is dropped)."""
        if self._remaining is None:
            return data
        audio = data[: self._remaining]
        self._remaining -= len(audio)
        return audio


def _read_fmt(fmt: bytes) -> WavInfo:
    """The format chunk, which must describe 16-bit PCM, mono or stereo, at a standard rate."""
    if len(fmt) < 16:
        raise InvalidAudioError("the WAV header's fmt chunk is too short")
    tag, channels, rate, _byte_rate, _align, bits = struct.unpack_from("<HHIIHH", fmt)
    if tag == _EXTENSIBLE and len(fmt) >= 26:
        (tag,) = struct.unpack_from("<H", fmt, 24)  # the sub-format GUID's first field
    if tag != _PCM or bits != 16:
        raise InvalidAudioError(
            f"only 16-bit PCM WAV audio is supported; this file is {bits}-bit, format {tag}"
        )
    if channels not in (1, 2):
        raise InvalidAudioError(f"WAV audio must be mono or stereo; this file has {channels}")
    if rate not in STANDARD_RATES:
        allowed = ", ".join(str(r) for r in STANDARD_RATES)
        raise InvalidAudioError(f"WAV sample rate must be one of {allowed} Hz; got {rate}")
    return WavInfo(rate, channels)
