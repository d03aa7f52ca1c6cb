"""Per-session audio input: raw client bytes in, float32 16 kHz mono samples out.

Supported encodings are little-endian int16 PCM, little-endian float32 PCM and ITU-T G.711
μ-law and A-law, at the standard rates from 8 to 48 kHz, mono or stereo.

`pcm_f32le` samples outside [-1, 1] are passed through unchanged (the model's frontend copes
with loud input, and clipping would hide a client's scaling bug behind distortion); only
non-finite samples (NaN, ±Inf) are rejected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import soxr

from streaming.errors import InvalidAudioError, InvalidFieldError, StateError

TARGET_RATE: Final = 16_000

# Bytes per sample (one channel) for each supported encoding.
SAMPLE_WIDTHS: Final = {"pcm_s16le": 2, "pcm_f32le": 4, "mulaw": 1, "alaw": 1}

# Rates outside this list (e.g. 12345) are almost surely a client bug, so they are rejected.
STANDARD_RATES: Final = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)

CHANNEL_COUNTS: Final = (1, 2)

# Exact power of two: int16 → float maps are bit-exact (no rounding) in float32.
_INT16_SCALE: Final = 1.0 / 32768.0

Float32Array = npt.NDArray[np.float32]
Int16Array = npt.NDArray[np.int16]


@dataclass(frozen=True, slots=True)
class AudioFormat:
    """The wire format of a session's binary audio frames."""

    encoding: str = "pcm_s16le"
    sample_rate: int = TARGET_RATE
    channels: int = 1

    def __post_init__(self) -> None:
        """Reject unsupported encodings, rates and channel counts with a typed error."""
        if not isinstance(self.encoding, str) or self.encoding not in SAMPLE_WIDTHS:
            allowed = ", ".join(SAMPLE_WIDTHS)
            raise InvalidFieldError(f"encoding must be one of {allowed}; got {self.encoding!r}")
        # bool is an int subclass; `sample_rate: true` from JSON must not mean 1 Hz.
        if type(self.sample_rate) is not int or self.sample_rate not in STANDARD_RATES:
            allowed = ", ".join(str(rate) for rate in STANDARD_RATES)
            raise InvalidFieldError(
                f"sample_rate must be one of {allowed} (Hz); got {self.sample_rate!r}"
            )
        if type(self.channels) is not int or self.channels not in CHANNEL_COUNTS:
            raise InvalidFieldError(f"channels must be 1 or 2; got {self.channels!r}")

    @property
    def sample_width(self) -> int:
        """Bytes per sample of one channel."""
        return SAMPLE_WIDTHS[self.encoding]

    @property
    def bytes_per_frame(self) -> int:
        """Bytes per frame: one sample for every channel."""
        return self.sample_width * self.channels


def ulaw_to_linear() -> Int16Array:
    """ITU-T G.711 μ-law decoding table: code 0..255 → int16 sample."""
    code = np.arange(256, dtype=np.int32) ^ 0xFF  # μ-law codes are stored bit-inverted
    exponent = (code >> 4) & 0x07
    mantissa = code & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return np.where(code & 0x80, -magnitude, magnitude).astype(np.int16)


def alaw_to_linear() -> Int16Array:
    """ITU-T G.711 A-law decoding table: code 0..255 → int16 sample."""
    code = np.arange(256, dtype=np.int32) ^ 0x55  # A-law inverts the even bits
    exponent = (code >> 4) & 0x07
    mantissa = code & 0x0F
    # Segment 0 is linear; higher segments add the implicit leading bit and shift.
    shifted = ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0)
    magnitude = np.where(exponent == 0, (mantissa << 4) + 8, shifted)
    # In A-law a set sign bit means a positive sample (the opposite of μ-law).
    return np.where(code & 0x80, magnitude, -magnitude).astype(np.int16)


def _new_resampler(in_rate: int) -> Any:
    """A streaming soxr resampler to 16 kHz (checked chunk-invariant by the tests)."""
    return soxr.ResampleStream(in_rate, TARGET_RATE, 1, dtype="float32", quality="HQ")


class AudioDecoder:
    """Decodes one session's audio bytes to float32 16 kHz mono, carrying partial frames over."""

    def __init__(self, fmt: AudioFormat) -> None:
        """Prepare tables and the resampler for `fmt`; one decoder per session."""
        self.format = fmt
        self._frame_bytes = fmt.bytes_per_frame
        # The 1/channels downmix gain is a power of two, so folding it into the
        # scale keeps int16 and G.711 decoding bit-exact and saves a pass.
        self._gain = 1.0 / fmt.channels
        self._table: Float32Array | None = None
        if fmt.encoding in ("mulaw", "alaw"):
            ints = ulaw_to_linear() if fmt.encoding == "mulaw" else alaw_to_linear()
            self._table = ints.astype(np.float32) * np.float32(_INT16_SCALE * self._gain)
        self._resampler: Any = None
        if fmt.sample_rate != TARGET_RATE:
            self._resampler = _new_resampler(fmt.sample_rate)
        self._pending = b""
        self._dropped = 0
        self._flushed = False
        self.samples_in = 0
        self.samples_out = 0

    @property
    def pending_bytes(self) -> int:
        """Bytes of an incomplete frame held for the next call."""
        return len(self._pending)

    @property
    def dropped_bytes(self) -> int:
        """Bytes of an incomplete trailing frame discarded by `flush`."""
        return self._dropped

    def decode(self, data: bytes | bytearray | memoryview) -> Float32Array:
        """Decode all complete frames available; all-or-nothing if the data is invalid."""
        if self._flushed:
            raise StateError("audio after the end of the stream")
        if isinstance(data, memoryview):
            data = data.cast("B")  # lengths below are in bytes, whatever the view's format
        # Clients normally send whole frames, so the join (a copy) is rare.
        buf = b"".join((self._pending, data)) if self._pending else data
        whole = len(buf) - len(buf) % self._frame_bytes
        view = memoryview(buf)[:whole]
        mono = self._to_mono(view)  # raises before any state changes
        self._pending = bytes(memoryview(buf)[whole:])
        self.samples_in += whole // self._frame_bytes
        out = self._resample(mono, last=False)
        self.samples_out += len(out)
        return out

    def flush(self) -> Float32Array:
        """End the stream: drop any incomplete frame and return the resampler's tail."""
        if self._flushed:
            return np.zeros(0, dtype=np.float32)
        self._flushed = True
        self._dropped = len(self._pending)
        self._pending = b""
        out = self._resample(np.zeros(0, dtype=np.float32), last=True)
        self.samples_out += len(out)
        return out

    def _to_mono(self, view: memoryview) -> Float32Array:
        """Whole frames → float32 mono at the source rate (a fresh array the caller owns)."""
        enc = self.format.encoding
        if self._table is not None:
            samples = self._table[np.frombuffer(view, dtype=np.uint8)]
        elif enc == "pcm_s16le":
            ints = np.frombuffer(view, dtype="<i2")
            samples = np.multiply(ints, _INT16_SCALE * self._gain, dtype=np.float32)
        else:
            floats = np.frombuffer(view, dtype="<f4")
            _check_finite(floats)
            # An owned, native-endian copy with the downmix gain applied in the same pass.
            samples = np.multiply(floats, self._gain, dtype=np.float32)
        if self.format.channels == 1:
            return samples
        return np.add(samples[0::2], samples[1::2])

    def _resample(self, mono: Float32Array, *, last: bool) -> Float32Array:
        """Send source-rate samples through the resampler, or straight through at 16 kHz."""
        if self._resampler is None:
            return mono
        if not last and mono.size == 0:
            return mono
        out: Float32Array = self._resampler.resample_chunk(mono, last=last)
        return out


def _check_finite(floats: npt.NDArray[np.floating[Any]]) -> None:
    """Raise InvalidAudioError if any float sample is NaN or ±Inf."""
    finite = np.isfinite(floats)
    if finite.all():
        return
    bad = np.flatnonzero(~finite)
    raise InvalidAudioError(
        f"pcm_f32le audio has {bad.size} non-finite (NaN or Inf) sample(s), "
        f"first at sample {int(bad[0])} of this message; the message was rejected"
    )
