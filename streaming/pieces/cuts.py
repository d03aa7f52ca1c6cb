"""Where speech that runs on without a pause is cut: its quietest stretch."""

from __future__ import annotations

import numpy as np


def quietest_cut(audio: np.ndarray, offset: int, window: int) -> int:
    """The stream sample in the middle of the quietest `window` samples of `audio` (which
    begins at stream sample `offset`); the earliest of equals, so the cut is the audio's."""
    if len(audio) <= window:
        return offset + len(audio) // 2
    energy = np.concatenate(([0.0], np.cumsum(np.square(audio, dtype=np.float64))))
    sums = energy[window:] - energy[:-window]
    return offset + int(np.argmin(sums)) + window // 2
