"""Voiced test signals in closed form (no random numbers), the same on every machine."""

from __future__ import annotations

import numpy as np

SAMPLE_RATE = 16000


def voiced(seconds: float, f0_from: float, f0_to: float, harmonics: int = 12) -> np.ndarray:
    """A vowel-like buzz: `harmonics` partials of a pitch gliding from `f0_from` to `f0_to`
    Hz, falling 6 dB an octave, under a 4 Hz syllable-like swell; float32, peak about 0.3."""
    t = np.arange(int(seconds * SAMPLE_RATE), dtype=np.float64) / SAMPLE_RATE
    f0 = f0_from + (f0_to - f0_from) * t / max(seconds, 1e-9)
    phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
    wave = sum(np.sin(k * phase) / k for k in range(1, harmonics + 1))
    swell = 0.6 + 0.4 * np.sin(2 * np.pi * 4.0 * t)
    return (0.1 * swell * wave).astype(np.float32)


# What the reference file holds, by name: (seconds, f0 from, f0 to).
SIGNALS = {"short": (1.0, 130.0, 130.0), "long": (3.7, 100.0, 220.0), "high": (2.2, 240.0, 200.0)}
