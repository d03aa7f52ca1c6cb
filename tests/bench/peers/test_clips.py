"""The benchmark's clips: real speech, lengths in range, the same every run."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tools.bench.common.speech import SAMPLE_RATE, make_clips, save_clips
from tools.bench.peers.scenarios import load_clips


def test_clips_are_speech_of_2_to_12_seconds_and_reproducible(tmp_path: Path) -> None:
    clips = make_clips(count=12)
    seconds = [len(c) / SAMPLE_RATE for c in clips]
    assert all(2.0 <= s <= 12.0 for s in seconds) and max(seconds) - min(seconds) > 4
    assert all(float(np.sqrt(np.mean(c**2))) > 0.01 for c in clips)  # not silence
    saved = load_clips(str(save_clips(tmp_path / "clips.npz", clips)))
    assert all(np.array_equal(a, b) for a, b in zip(clips, saved, strict=True))
    # Made again: the same cuts of the same speech (sox's dither moves the last bits).
    again = make_clips(count=12)
    assert all(np.allclose(a, b, atol=1e-3) for a, b in zip(clips, again, strict=True))
