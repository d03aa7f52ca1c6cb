"""Made-up speaker embeddings: voices as random unit vectors, utterances near them."""

from __future__ import annotations

import numpy as np

DIM = 256


def voices(count: int, seed: int) -> np.ndarray:
    """`count` random unit vectors: in 256 dimensions, nearly orthogonal."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((count, DIM))
    out: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def utterance(voice: np.ndarray, rng: np.random.Generator, spread: float = 0.5) -> np.ndarray:
    """An utterance of `voice`: its direction plus noise (spread 0.5: about 0.9 cosine
    from it, 0.8 between two utterances)."""
    v = voice + spread * rng.standard_normal(DIM) / np.sqrt(DIM)
    out: np.ndarray = v / np.linalg.norm(v)
    return out
