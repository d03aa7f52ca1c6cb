"""Speech that runs on is cut at its quietest stretch."""

from __future__ import annotations

import numpy as np

from streaming.pieces.cuts import quietest_cut


def test_the_cut_falls_in_the_middle_of_the_quietest_window() -> None:
    audio = np.full(16000, 0.5, np.float32)
    audio[9000:9200] = 0.01  # a dip of 200 samples
    cut = quietest_cut(audio, offset=48000, window=100)
    assert 48000 + 9000 + 50 <= cut <= 48000 + 9200 - 50


def test_equal_stretches_give_the_earliest_and_short_audio_its_middle() -> None:
    assert quietest_cut(np.zeros(1000, np.float32), 0, 100) == 50
    assert quietest_cut(np.zeros(80, np.float32), 10, 100) == 50
