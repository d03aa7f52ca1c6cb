"""Real speech for tests: espeak-ng sentences converted to 16 kHz mono with sox."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

SENTENCES: tuple[tuple[str, str], ...] = (
    ("en-us", "Hello there, friend."),
    ("en-us", "The quick brown fox jumps over the lazy dog."),
    ("cmn", "今天天气很好，我们去公园散步吧。"),
    ("en-us", "Please call me back when you get this message, it is about the meeting tomorrow."),
    ("en-gb", "Numbers like one hundred and twenty three should be written as digits."),
    ("cmn", "欢迎使用实时语音识别服务，这是一个测试句子，用来检查系统是否正常工作。"),
    (
        "en-us",
        "Streaming speech recognition turns live audio into text while the person is still "
        "talking, and a final result arrives soon after they stop speaking, with timestamps.",
    ),
    (
        "en-us",
        "Call centres record many telephone conversations at once. Each call is sampled at "
        "eight kilohertz and compressed with mu law. The server must decode every one of "
        "them, keep the sessions apart, and deliver every final result it owes, even when "
        "the machine is busy and the queue is long.",
    ),
)


def require_tools() -> None:
    """Fail loudly when the Debian packages that make test speech are missing."""
    missing = [t for t in ("espeak-ng", "sox") if shutil.which(t) is None]
    if missing:
        raise RuntimeError(f"missing {', '.join(missing)}: apt-get install espeak-ng sox")


@dataclass(frozen=True)
class Clip:
    name: str
    path: Path
    audio: np.ndarray  # float32, 16 kHz mono

    @property
    def seconds(self) -> float:
        return len(self.audio) / 16000


def synthesize(text: str, voice: str, out_dir: Path, rate: int = 16000, speed: int = 160) -> Path:
    """Speak `text` into a mono 16-bit wav at `rate` Hz, cached by content hash."""
    require_tools()
    key = hashlib.sha1(f"{voice}|{speed}|{rate}|{text}".encode()).hexdigest()[:16]
    out = out_dir / f"{key}.wav"
    if out.exists():
        return out
    raw = out_dir / f"{key}.raw.wav"
    subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(raw), text],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        ["sox", str(raw), "-r", str(rate), "-c", "1", "-b", "16", str(out)],
        check=True,
        capture_output=True,
    )
    raw.unlink()
    return out


def load(path: Path) -> np.ndarray:
    audio, rate = sf.read(str(path), dtype="float32")
    if rate != 16000:
        raise ValueError(f"{path} is {rate} Hz; expected 16000")
    return np.ascontiguousarray(audio, dtype=np.float32)


def make_clips(out_dir: Path) -> list[Clip]:
    """The standard clip set: 8 sentences of roughly 1-20 s in English and Mandarin."""
    out_dir.mkdir(parents=True, exist_ok=True)
    clips = []
    for i, (voice, text) in enumerate(SENTENCES):
        path = synthesize(text, voice, out_dir)
        clips.append(Clip(f"clip{i}", path, load(path)))
    return clips
