"""Rougher audio for training: level, silence around speech, noise, a telephone band, and
background music (which makes the utterance's event tag BGM)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import soxr

from streaming.audio.decoder import ulaw_to_linear
from tools.g711 import encode_mulaw

SAMPLE_RATE = 16000


@dataclass(frozen=True, slots=True)
class Augmented:
    audio: np.ndarray
    music: bool


#: Share of training utterances over background music, unless a data set asks for another.
MUSIC_SHARE = 0.15


def augment(speech: np.ndarray, rng: random.Random, music_share: float = MUSIC_SHARE) -> Augmented:
    """One random roughening of `speech` (16 kHz float32), over music `music_share` of
    the time."""
    audio = _pad(speech, rng)
    music = rng.random() < music_share
    if music:
        audio = mix(audio, background_music(len(audio), rng), rng.uniform(3, 15))
    if rng.random() < 0.5:
        audio = mix(audio, _noise(len(audio), rng), rng.uniform(10, 40))
    if rng.random() < 0.2:
        audio = telephone(audio)
    peak = float(np.max(np.abs(audio))) or 1.0
    audio = audio * (rng.uniform(0.05, 0.95) / peak)
    return Augmented(audio.astype(np.float32), music)


#: Share of edges left bare. Were every plain utterance padded with silence, music (which
#: fills the whole length) would be the only audio with sound at its edges, and the model
#: learns that shortcut: at 4,500 steps it called 30 % of bare clean sentences BGM and none
#: of the same sentences with 0.2 s of silence around them.
BARE_EDGE_SHARE = 0.3


def _pad(speech: np.ndarray, rng: random.Random) -> np.ndarray:
    before, after = (
        0 if rng.random() < BARE_EDGE_SHARE else int(rng.uniform(0.05, 0.4) * SAMPLE_RATE)
        for _ in range(2)
    )
    return np.concatenate([np.zeros(before, np.float32), speech, np.zeros(after, np.float32)])


def mix(audio: np.ndarray, other: np.ndarray, snr_db: float) -> np.ndarray:
    power = float(np.mean(audio**2)) or 1e-9
    other_power = float(np.mean(other**2)) or 1e-9
    scale = float(np.sqrt(power / (other_power * 10 ** (snr_db / 10))))
    return np.asarray(audio + scale * other, np.float32)


def _noise(n: int, rng: random.Random) -> np.ndarray:
    """White or pink noise."""
    gen = np.random.default_rng(rng.getrandbits(32))
    white = gen.standard_normal(n).astype(np.float32)
    if rng.random() < 0.5:
        return white
    spectrum = np.fft.rfft(white)
    spectrum /= np.sqrt(np.arange(1, len(spectrum) + 1))
    return np.fft.irfft(spectrum, n).astype(np.float32)


def telephone(audio: np.ndarray) -> np.ndarray:
    """Through an 8 kHz μ-law line and back."""
    narrow = soxr.resample(audio, SAMPLE_RATE, 8000, quality="HQ")
    peak = float(np.max(np.abs(narrow))) or 1.0
    codes = np.frombuffer(encode_mulaw(narrow / peak * 0.9), np.uint8)
    decoded = ulaw_to_linear()[codes].astype(np.float32) / 32768 * (peak / 0.9)
    return np.asarray(soxr.resample(decoded, 8000, SAMPLE_RATE, quality="HQ"), np.float32)


def background_music(n: int, rng: random.Random) -> np.ndarray:
    """Chords of harmonic tones with note envelopes, and sometimes a beat."""
    out = np.zeros(n, np.float32)
    note_s, at = rng.uniform(0.2, 0.6), 0
    root = rng.choice([196.0, 220.0, 246.9, 261.6, 293.7])
    while at < n:
        length = min(int(note_s * SAMPLE_RATE), n - at)
        chord = rng.choice([(0, 4, 7), (0, 3, 7), (0, 5, 9), (2, 5, 9), (-5, 0, 4)])
        t = np.arange(length) / SAMPLE_RATE
        tone = sum(_tone(root * 2 ** (step / 12), t, rng) for step in chord)
        out[at : at + length] += np.asarray(tone, np.float32) * _envelope(length)
        at += length
    if rng.random() < 0.5:
        out += _beat(n, rng)
    return out


def _tone(freq: float, t: np.ndarray, rng: random.Random) -> np.ndarray:
    harmonics = rng.choice([1, 3, 5])
    out = np.zeros_like(t)
    for k in range(1, harmonics + 1):
        out += np.sin(2 * np.pi * freq * k * t) / k
    return out


def _envelope(length: int) -> np.ndarray:
    attack = max(1, min(length // 10, 400))
    env = np.exp(-np.arange(length) / (length * 0.6))
    env[:attack] *= np.linspace(0, 1, attack)
    return env.astype(np.float32)


def _beat(n: int, rng: random.Random) -> np.ndarray:
    gen = np.random.default_rng(rng.getrandbits(32))
    out = np.zeros(n, np.float32)
    period = int(rng.uniform(0.3, 0.6) * SAMPLE_RATE)
    hit = gen.standard_normal(1200).astype(np.float32) * np.exp(-np.arange(1200) / 200)
    for start in range(0, n - len(hit), period):
        out[start : start + len(hit)] += hit
    return out
