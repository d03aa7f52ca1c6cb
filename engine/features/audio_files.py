"""Read audio files of any common format and rate into float32 16 kHz mono."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from engine.errors import AudioError
from engine.types import SAMPLE_RATE


def read_audio(path: Path, target_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Decode wav, flac, ogg or mp3 (libsndfile), downmix, and resample with soxr."""
    try:
        audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, OSError, TypeError) as exc:
        raise AudioError(f"cannot read {path}: {exc}") from exc
    mono = audio.mean(axis=1, dtype=np.float32) if audio.shape[1] > 1 else audio[:, 0]
    return resample(mono, rate, target_rate)


def resample(audio: np.ndarray, rate: int, target_rate: int = SAMPLE_RATE) -> np.ndarray:
    """One-shot high-quality resampling; a no-op at the target rate."""
    if rate == target_rate or audio.size == 0:
        return np.ascontiguousarray(audio, dtype=np.float32)
    out = soxr.resample(audio, rate, target_rate, quality="HQ")
    return np.ascontiguousarray(out, dtype=np.float32)
