"""Training audio roughening: what each step does to the signal."""

from __future__ import annotations

import random

import numpy as np

from tools.demo_model.augment import SAMPLE_RATE, augment, background_music, telephone


def band_energy(audio: np.ndarray, low_hz: float, high_hz: float) -> float:
    spectrum = np.abs(np.fft.rfft(audio)) ** 2
    freqs = np.fft.rfftfreq(len(audio), 1 / SAMPLE_RATE)
    return float(spectrum[(freqs >= low_hz) & (freqs < high_hz)].sum())


def test_the_telephone_line_removes_everything_above_4_khz() -> None:
    noise = np.random.default_rng(0).standard_normal(SAMPLE_RATE).astype(np.float32) * 0.1
    line = telephone(noise)
    assert abs(len(line) - len(noise)) <= 2
    assert band_energy(line, 4200, 8000) < 0.01 * band_energy(noise, 4200, 8000)
    assert band_energy(line, 500, 3000) > 0.5 * band_energy(noise, 500, 3000)


def test_music_is_tonal_and_fills_the_whole_length() -> None:
    bed = background_music(SAMPLE_RATE * 2, random.Random(1))
    assert bed.shape == (SAMPLE_RATE * 2,)
    quarters = np.array_split(np.abs(bed), 4)
    assert all(q.mean() > 0.01 for q in quarters)


def test_augment_pads_with_silence_scales_the_peak_and_reports_music() -> None:
    speech = np.sin(np.linspace(0, 600, SAMPLE_RATE)).astype(np.float32)
    results = [augment(speech, random.Random(seed)) for seed in range(60)]
    for r in results:
        assert r.audio.dtype == np.float32
        assert 0.04 < float(np.abs(r.audio).max()) <= 0.951
    music = sum(r.music for r in results)
    assert 0 < music < 25  # about 15 % of the time
    padding = [len(r.audio) - len(speech) for r in results]
    assert sum(p >= 0.1 * SAMPLE_RATE for p in padding) > 30  # mostly silence around it


def test_some_plain_utterances_have_no_silence_around_them_as_music_never_does() -> None:
    speech = np.sin(np.linspace(0, 600, SAMPLE_RATE)).astype(np.float32)
    results = [augment(speech, random.Random(seed)) for seed in range(100)]
    # Both edges bare (about 9 %): the audio is no longer than the speech.
    bare = [r for r in results if abs(len(r.audio) - len(speech)) <= 2]
    assert 3 <= len(bare) <= 20
