"""espeak-ng speech as 16 kHz mono float32: the one place that runs espeak-ng and sox."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

SAMPLE_RATE = 16000
# espeak-ng's words per minute. Every cache made so far (tests, .whl/bench-speech) used
# 160, and the speed is part of the cache key.
SPEED = 160
TOOLS = ("espeak-ng", "sox")


def missing_tools() -> list[str]:
    """The Debian packages that make speech and are not installed."""
    return [t for t in TOOLS if shutil.which(t) is None]


def require_tools() -> None:
    """Fail loudly when the Debian packages that make speech are missing."""
    missing = missing_tools()
    if missing:
        raise RuntimeError(f"missing {', '.join(missing)}: apt-get install espeak-ng sox")


def cache_key(text: str, voice: str, rate: int, speed: int) -> str:
    """The file name stem a sentence is cached under (stable across versions)."""
    return hashlib.sha1(f"{voice}|{speed}|{rate}|{text}".encode()).hexdigest()[:16]


def synthesize(
    text: str, voice: str, out_dir: Path, rate: int = SAMPLE_RATE, speed: int = SPEED
) -> Path:
    """Speak `text` into a mono 16-bit wav at `rate` Hz in `out_dir`, cached by content.

    A cached file is used without espeak-ng or sox, so a host with only the cache (the
    GPU host) works. The wav appears under its final name only once complete.
    """
    out = out_dir / f"{cache_key(text, voice, rate, speed)}.wav"
    if out.exists():
        return out
    require_tools()
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        raw, converted = Path(tmp) / "espeak.wav", Path(tmp) / "sox.wav"
        subprocess.run(
            ["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(raw), text],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            ["sox", str(raw), "-r", str(rate), "-c", "1", "-b", "16", str(converted)],
            check=True,
            capture_output=True,
        )
        os.replace(converted, out)
    return out


def load(path: Path) -> np.ndarray:
    """A 16 kHz mono wav as contiguous float32."""
    audio, rate = sf.read(str(path), dtype="float32")
    if rate != SAMPLE_RATE:
        raise ValueError(f"{path} is {rate} Hz; expected {SAMPLE_RATE}")
    return np.ascontiguousarray(audio, dtype=np.float32)


def speak(
    text: str, voice: str = "en-us", *, cache_dir: Path | None = None, speed: int = SPEED
) -> np.ndarray:
    """`text` spoken at 16 kHz; cached in `cache_dir` when given, else made afresh."""
    if cache_dir is not None:
        return load(synthesize(text, voice, cache_dir, speed=speed))
    with tempfile.TemporaryDirectory() as tmp:
        return load(synthesize(text, voice, Path(tmp), speed=speed))


def levels_dbfs(audio: np.ndarray) -> np.ndarray:
    """The level of each whole 10 ms frame in dBFS."""
    frames = audio[: audio.size // 160 * 160].reshape(-1, 160).astype(np.float64)
    levels: np.ndarray = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    return levels


def trim_silence(audio: np.ndarray, threshold_dbfs: float = -45.0) -> np.ndarray:
    """Cut leading and trailing 10 ms frames quieter than `threshold_dbfs`."""
    loud = np.flatnonzero(levels_dbfs(audio) > threshold_dbfs)
    if loud.size == 0:
        return audio[:0]
    return audio[loud[0] * 160 : (loud[-1] + 1) * 160]


def noise_floor(samples: int, seed: int, dbfs: float = -70.0) -> np.ndarray:
    """Gaussian noise at `dbfs` (relative to a full-scale sine), in float64.

    Speech on a faint floor instead of digital zeros, as a microphone gives it.
    """
    rng = np.random.default_rng(seed)
    noise: np.ndarray = rng.standard_normal(samples) * 10 ** (dbfs / 20) * np.sqrt(2)
    return noise
