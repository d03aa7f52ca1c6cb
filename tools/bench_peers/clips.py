"""The clips both engines decode: espeak-ng speech cut into lengths of 2 to 12 s."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from tools.bench_engine import PASSAGE
from tools.speech import speak

SAMPLE_RATE = 16000


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
