"""The speech maker: espeak-ng via sox to 16 kHz, cached under a key older caches share."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tools.speech import SAMPLE_RATE, cache_key, speak, synthesize, trim_silence


def test_speech_is_16_khz_float32_and_cached(tmp_path: Path) -> None:
    path = synthesize("The quick brown fox.", "en-us", tmp_path)
    audio = speak("The quick brown fox.", cache_dir=tmp_path)
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert 0.8 < audio.size / SAMPLE_RATE < 3.0
    assert float(np.abs(audio).max()) > 0.1
    assert sf.info(str(path)).samplerate == SAMPLE_RATE
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # nothing half-made left


def test_a_cached_sentence_needs_neither_espeak_nor_sox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU host has only the cache (.whl/bench-speech), made here with this key."""
    assert cache_key("Good morning, how can I help you today?", "en-us", 16000, 160) == (
        "d1a483349526dc7b"
    )
    cached = tmp_path / f"{cache_key('Hello.', 'en-us', 16000, 160)}.wav"
    sf.write(cached, np.zeros(1600, np.float32), SAMPLE_RATE, subtype="PCM_16")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert synthesize("Hello.", "en-us", tmp_path) == cached
    with pytest.raises(RuntimeError, match="missing espeak-ng, sox"):
        synthesize("Not cached.", "en-us", tmp_path)


def test_silence_is_trimmed_to_the_loud_frames() -> None:
    audio = np.zeros(16000, np.float32)
    audio[3200:8000] = 0.5
    trimmed = trim_silence(audio)
    assert trimmed.size == 4800 and np.all(trimmed == 0.5)
    assert trim_silence(np.zeros(1600, np.float32)).size == 0
