"""The speech several benchmarks decode: an espeak-ng passage, clips of 2 to 12 s cut
from it (saved as an npz for worker processes), and noise where espeak-ng is missing."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from tools.speech import speak

SAMPLE_RATE = 16000
PASSAGE = (
    "Streaming speech recognition turns live audio into text while a person is still "
    "talking. Call centres record many conversations at once, and each one must be decoded "
    "quickly and kept apart from the others. The final result arrives soon after the "
    "speaker stops, with the language, the emotion and any sound events that were heard. "
)


def stand_in_noise(seconds: float) -> np.ndarray:
    """`seconds` of the same white noise every run, for a host without espeak-ng."""
    rng = np.random.default_rng(0)
    return (0.1 * rng.standard_normal(int(seconds * SAMPLE_RATE))).astype(np.float32)


def make_clips(
    count: int = 40, seed: int = 20, low_s: float = 2.0, high_s: float = 12.0
) -> list[np.ndarray]:
    """`count` clips of real speech, lengths uniform in [low_s, high_s], arrival order random."""
    source = speak(PASSAGE * 4)
    rng = random.Random(seed)
    clips = []
    for _ in range(count):
        n = int(rng.uniform(low_s, high_s) * SAMPLE_RATE)
        start = rng.randrange(0, len(source) - n)
        clips.append(np.ascontiguousarray(source[start : start + n], np.float32))
    return clips


def save_clips(path: Path, clips: list[np.ndarray]) -> Path:
    """An npz the workers read (keys sort in the clips' order)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, Any] = {f"clip{i:04d}": c for i, c in enumerate(clips)}
    np.savez(path, **arrays)
    return path
