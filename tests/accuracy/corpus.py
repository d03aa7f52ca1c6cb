"""The accuracy test set: held-out demo sentences in a trained voice, as two long files.

Each file is what a caller would send: sentences with pauses long enough for the VAD to
close each one, on a faint noise floor, quantized to 16-bit as every path carries it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sensestream.client import pcm16
from tools.demo_model import texts
from tools.demo_model.voices import Voice, speak
from tools.speech import noise_floor

SR = 16000
SEED = 19
SENTENCES_PER_FILE = 4
FILES = 4
#: A voice the demo model was trained on, at its own prosody: the test measures the
#: pipeline, not how the model copes with an unseen speaker.
VOICE = Voice("espeak", "en-us+m3")
LEAD_S, PAUSE_S, TAIL_S = 0.5, 1.0, 3.0


@dataclass(frozen=True)
class AudioFile:
    """One file: its 16 kHz samples (exactly representable as s16le) and reference text."""

    name: str
    audio: np.ndarray
    reference: str
    spans: tuple[tuple[int, int], ...]  # each sentence's samples

    def sentences(self, context_s: float) -> list[np.ndarray]:
        """Each sentence's audio with `context_s` of what surrounds it on either side."""
        pad = round(context_s * SR)
        return [self.audio[max(0, a - pad) : b + pad] for a, b in self.spans]

    @property
    def seconds(self) -> float:
        return len(self.audio) / SR


def quantized(audio: np.ndarray) -> np.ndarray:
    """`audio` as the s16le samples a client sends, back in float32."""
    return np.frombuffer(pcm16(audio), "<i2").astype(np.float32) / 32768


def silence(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * SR), np.float32)


def make_file(name: str, sentences: list[texts.Sentence], seed: int) -> AudioFile:
    parts, spans, at = [silence(LEAD_S)], [], round(LEAD_S * SR)
    for i, sentence in enumerate(sentences):
        if i:
            parts.append(silence(PAUSE_S))
            at += parts[-1].size
        parts.append(speak(sentence.spoken, VOICE))
        spans.append((at, at + parts[-1].size))
        at += parts[-1].size
    parts.append(silence(TAIL_S))
    audio = np.concatenate(parts)
    audio = quantized((audio + noise_floor(audio.size, seed=seed)).astype(np.float32))
    # The server decodes with ITN on by default, so the reference is the written form.
    reference = " ".join(s.written for s in sentences)
    return AudioFile(name, audio, reference, tuple(spans))


def make_test_set() -> list[AudioFile]:
    sentences = texts.held_out(SEED, FILES * SENTENCES_PER_FILE)
    return [
        make_file(f"file{i}", sentences[i * SENTENCES_PER_FILE : (i + 1) * SENTENCES_PER_FILE], i)
        for i in range(FILES)
    ]
