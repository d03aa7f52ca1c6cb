"""The benchmark's speech: espeak-ng sentences of 2-12 s, pre-encoded as 100 ms frames.

Each sentence is said whole, or (`phrase_pause_ms` > 0) as a call's speaker says it: in
phrases of 3 to 6 words, each said alone, with that much quiet between them, so that an
utterance holds pauses a server may commit text at (issue 49)."""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sensestream.client import pcm16
from tools.bench.common.phrases import phrase_texts
from tools.speech import SAMPLE_RATE, load, noise_floor, synthesize, trim_silence

FRAME_MS = 100
FRAME_SAMPLES = SAMPLE_RATE * FRAME_MS // 1000
MIN_UTTERANCE_S, MAX_UTTERANCE_S = 2.0, 12.0
PHRASE_WORDS = (3, 6)

# Single sentences (commas only: a sentence break could outlast the VAD's end-silence and
# split an utterance), about 2-12 s each at espeak-ng's speed 160.
SENTENCES: tuple[tuple[str, str], ...] = (
    ("en-us", "Good morning, how can I help you today?"),
    ("en-us", "Thank you for calling, please hold the line."),
    ("en-us", "The quick brown fox jumps over the lazy dog."),
    ("en-gb", "Could you tell me the opening hours of the library on Saturday?"),
    ("cmn", "今天天气很好，我们去公园散步吧。"),
    ("en-gb", "Numbers like one hundred and twenty three should be written as digits."),
    ("en-us", "Please call me back when you get this message, it is about the meeting tomorrow."),
    ("cmn", "欢迎使用实时语音识别服务，这是一个测试句子，用来检查系统是否正常工作。"),
    (
        "en-us",
        "We measured the latency of every final result while many clients were streaming "
        "audio at the same time, and the numbers stayed low.",
    ),
    (
        "en-us",
        "Streaming speech recognition turns live audio into text while the person is still "
        "talking, and a final result arrives soon after they stop speaking.",
    ),
    (
        "en-gb",
        "I would like to change the delivery address for my order, because I will be away "
        "from home for the next two weeks and nobody can sign for the parcel at the door.",
    ),
    (
        "en-us",
        "The train to the airport leaves every fifteen minutes from platform four, and the "
        "journey takes about half an hour if there are no delays on the line, so please "
        "leave a little early.",
    ),
)


@dataclass(frozen=True, slots=True)
class Clip:
    """One pool utterance: shared pre-encoded frames and the speech length in samples."""

    voice: str
    text: str
    frames: tuple[bytes, ...]
    samples: int

    @property
    def seconds(self) -> float:
        return self.samples / SAMPLE_RATE


def default_speech_dir() -> Path:
    """Where synthesized sentences are cached between runs."""
    root = Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")))
    return root / "sensestream" / "bench-speech"


def to_frames(audio: np.ndarray) -> tuple[bytes, ...]:
    """100 ms pcm_s16le frames, the last one padded with zeros."""
    padded = np.zeros(math.ceil(audio.size / FRAME_SAMPLES) * FRAME_SAMPLES, np.float32)
    padded[: audio.size] = audio
    data = pcm16(padded)
    step = FRAME_SAMPLES * 2
    return tuple(data[i : i + step] for i in range(0, len(data), step))


def build_pool(cache_dir: Path, phrase_pause_ms: int = 0, seed: int = 0) -> list[Clip]:
    """Synthesize (once, cached) and pre-encode every sentence of 2-12 s of speech (not
    counting the pauses between its phrases, with `phrase_pause_ms`)."""
    pool = []
    rng = random.Random(seed)
    for voice, text in SENTENCES:
        texts = phrase_texts(text, PHRASE_WORDS, rng) if phrase_pause_ms > 0 else [text]
        said = [trim_silence(load(synthesize(t, voice, cache_dir))) for t in texts]
        speech_s = sum(a.size for a in said) / SAMPLE_RATE
        if MIN_UTTERANCE_S <= speech_s <= MAX_UTTERANCE_S:
            audio = with_pauses(said, phrase_pause_ms * SAMPLE_RATE // 1000, seed)
            pool.append(Clip(voice, text, to_frames(audio), int(audio.size)))
    if not pool:
        raise RuntimeError("no espeak-ng sentence came out between 2 and 12 s")
    return pool


def with_pauses(phrases: list[np.ndarray], pause: int, seed: int) -> np.ndarray:
    """The phrases in order, `pause` samples of -70 dBFS noise between each two."""
    if len(phrases) == 1:
        return phrases[0]
    gap = noise_floor(pause, seed).astype(np.float32)
    parts = [p for phrase in phrases for p in (gap, phrase)][1:]
    return np.concatenate(parts)


def silence_frames(seed: int, count: int = 8) -> tuple[bytes, ...]:
    """A few distinct 100 ms frames of -70 dBFS noise, shared by every stream."""
    noise = noise_floor(count * FRAME_SAMPLES, seed).astype(np.float32)
    return to_frames(noise)
