"""G.711 μ-law encoding for test and benchmark clients (the server only decodes it)."""

from __future__ import annotations

import numpy as np

from sensestream.client import pcm16
from streaming.audio.decoder import ulaw_to_linear

#: μ-law's code for silence (a zero sample).
MULAW_SILENCE = 0xFF


def encode_mulaw(audio: np.ndarray) -> bytes:
    """Float samples in [-1, 1] as μ-law codes, each the code whose value is nearest."""
    linear = np.frombuffer(pcm16(audio), "<i2").astype(np.int32)
    table = ulaw_to_linear().astype(np.int32)
    order = np.argsort(table, kind="stable")
    ranked = table[order]
    upper = np.clip(np.searchsorted(ranked, linear), 1, len(ranked) - 1)
    nearer = np.where(linear - ranked[upper - 1] <= ranked[upper] - linear, upper - 1, upper)
    return bytes(order[nearer].astype(np.uint8).tobytes())
