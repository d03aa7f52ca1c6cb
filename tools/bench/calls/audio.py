"""Telephone audio: 16 kHz speech to 8 kHz G.711 μ-law, channels interleaved, 100 ms frames."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import soxr

from tools.bench.capacity.corpus import FRAME_MS, Clip
from tools.g711 import encode_mulaw
from tools.speech import SAMPLE_RATE

RATE = 8000
FRAME_SAMPLES = RATE * FRAME_MS // 1000  # one byte each in μ-law


def clip_audio(clip: Clip) -> np.ndarray:
    """A pool clip's speech back as 16 kHz float32 (its frames are padded pcm_s16le)."""
    pcm = np.frombuffer(b"".join(clip.frames), "<i2")[: clip.samples]
    return (pcm.astype(np.float32) / 32768).astype(np.float32)


def to_8k(audio: np.ndarray) -> np.ndarray:
    """16 kHz float32 resampled to 8 kHz (soxr, as a telephone line's codec would band-limit)."""
    out: np.ndarray = soxr.resample(audio, SAMPLE_RATE, RATE).astype(np.float32)
    return out


def mulaw(audio: np.ndarray) -> bytes:
    """Float samples as G.711 μ-law bytes (the nearest code by the server's own table)."""
    return encode_mulaw(audio)


def interleave(channels: Sequence[bytes]) -> bytes:
    """One-byte samples of equal-length channels, interleaved sample by sample."""
    arrays = [np.frombuffer(c, np.uint8) for c in channels]
    if len({a.size for a in arrays}) != 1:
        raise ValueError("channels differ in length")
    return np.stack(arrays, axis=1).tobytes()


def frames(data: bytes, channels: int) -> tuple[bytes, ...]:
    """μ-law bytes of `channels` interleaved channels in 100 ms frames (the last may be short)."""
    step = FRAME_SAMPLES * channels
    return tuple(data[i : i + step] for i in range(0, len(data), step))
