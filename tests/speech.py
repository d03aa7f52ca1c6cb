"""Real speech for tests: the standard espeak-ng clips and the signals built from them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sensestream.client import pcm16, split
from tools.speech import levels_dbfs, load, noise_floor, synthesize

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

# The wire format every test client sends, and frames of it.
to_s16le = pcm16
chunks = split


@dataclass(frozen=True)
class Clip:
    name: str
    path: Path
    audio: np.ndarray  # float32, 16 kHz mono

    @property
    def seconds(self) -> float:
        return len(self.audio) / 16000


def make_clips(out_dir: Path) -> list[Clip]:
    """The standard clip set: 8 sentences of roughly 1-20 s in English and Mandarin."""
    clips = []
    for i, (voice, text) in enumerate(SENTENCES):
        path = synthesize(text, voice, out_dir)
        clips.append(Clip(f"clip{i}", path, load(path)))
    return clips


def three_sentences(clips: list[Clip]) -> np.ndarray:
    """Three English sentences 1.5 s apart, 0.5 s of lead and tail, on a -70 dBFS noise floor."""
    edge, gap = np.zeros(8000, np.float32), np.zeros(24000, np.float32)
    parts = [edge, clips[0].audio, gap, clips[1].audio, gap, clips[3].audio, edge]
    audio = np.concatenate(parts)
    return (audio + noise_floor(audio.size, seed=7)).astype(np.float32)


def sentences_apart(clips: list[Clip], seconds: float) -> np.ndarray:
    """The English clips over and over, each followed by a second of quiet, for at least
    `seconds`: a stream with a pause between every two utterances."""
    english = [c.audio for c in clips if c.name.startswith("en")] or [c.audio for c in clips]
    parts: list[np.ndarray] = []
    while sum(len(p) for p in parts) < seconds * 16000:
        for audio in english:
            parts += [audio, np.zeros(16000, np.float32)]
    return np.concatenate(parts)


def long_speech(out_dir: Path, seconds: float = 40.0) -> np.ndarray:
    """Continuous speech (no pauses longer than espeak's commas) of at least `seconds`."""
    text = ", ".join(["streaming recognition keeps running while the speaker goes on talking"] * 12)
    speech = load(synthesize(text, "en-us", out_dir, speed=190))
    reps = int(np.ceil(seconds * 16000 / len(speech)))
    return np.tile(speech, reps)[: int(seconds * 16000)]


def energy_regions(
    audio: np.ndarray, threshold_dbfs: float = -40.0, merge_gap_ms: int = 300
) -> list[tuple[int, int]]:
    """Reference speech in samples: 10 ms frames above `threshold_dbfs`, short gaps merged."""
    loud = np.flatnonzero(levels_dbfs(audio) > threshold_dbfs)
    found: list[tuple[int, int]] = []
    for frame in loud.tolist():
        if found and frame * 160 - found[-1][1] < merge_gap_ms * 16:
            found[-1] = (found[-1][0], (frame + 1) * 160)
        else:
            found.append((frame * 160, (frame + 1) * 160))
    return found
