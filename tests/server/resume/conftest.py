"""What the resume tests share: a minute of speech."""

from __future__ import annotations

import numpy as np
import pytest

from tests.speech import Clip, to_s16le

SR = 16000


@pytest.fixture(scope="module")
def speech(speech_clips: list[Clip]) -> bytes:
    """About a minute of English sentences, each followed by a second of quiet."""
    english = [c.audio for c in speech_clips if c.name.startswith("en")] or [
        c.audio for c in speech_clips
    ]
    parts: list[np.ndarray] = []
    while sum(len(p) for p in parts) < 60 * SR:
        for audio in english:
            parts += [audio, np.zeros(SR, np.float32)]
    return to_s16le(np.concatenate(parts))
