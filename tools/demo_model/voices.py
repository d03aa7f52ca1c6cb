"""Synthetic voices: espeak-ng accents and variants, and flite's voices, as 16 kHz float32.

Some voices are never trained on (`UNSEEN`): an espeak accent with a variant that
training never uses, and one flite voice, so evaluation can report an unseen voice.
"""

from __future__ import annotations

import io
import random
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

SAMPLE_RATE = 16000

ESPEAK_ACCENTS = (
    "en-us",
    "en-gb",
    "en-gb-scotland",
    "en-gb-x-rp",
    "en-gb-x-gbclan",
    "en-gb-x-gbcwmd",
    "en-us-nyc",
)
ESPEAK_VARIANTS = (
    "m1", "m2", "m3", "m4", "m5", "m7", "m8", "f1", "f2", "f3", "f5",
    "klatt", "klatt2", "klatt3", "Alex", "Andy", "Annie", "adam", "anika", "belinda",
    "benjamin", "david", "ed", "edward", "john", "linda", "max", "michel", "norbert", "paul",
)  # fmt: skip
FLITE_VOICES = ("kal", "kal16", "awb", "slt")


@dataclass(frozen=True, slots=True)
class Voice:
    engine: str  # "espeak" or "flite"
    name: str  # espeak "accent+variant", or a flite voice

    def __str__(self) -> str:
        return f"{self.engine}:{self.name}"


UNSEEN = (Voice("espeak", "en-029+m6"), Voice("flite", "rms"))


def training_voices() -> list[Voice]:
    """Every voice training may use (none of `UNSEEN`); flite's only when it is installed."""
    voices = [Voice("espeak", f"{a}+{v}") for a in ESPEAK_ACCENTS for v in ESPEAK_VARIANTS]
    if shutil.which("flite"):
        voices += [Voice("flite", v) for v in FLITE_VOICES]
    return voices


#: Share of training utterances in a flite voice. flite's four are a few of some fifty
#: voices: drawn uniformly they made 9 % of the data, and at 5,000 steps the unseen flite
#: voice (rms) had 40 % WER against 11 % for the unseen espeak one.
FLITE_SHARE = 0.35


def pick_training_voice(rng: random.Random) -> Voice:
    """A training voice: flite's `FLITE_SHARE` of the time when flite is installed."""
    pool = training_voices()
    flite = [v for v in pool if v.engine == "flite"]
    if flite and rng.random() < FLITE_SHARE:
        return rng.choice(flite)
    return rng.choice([v for v in pool if v.engine == "espeak"])


class MissingSpeechEngine(RuntimeError):
    """espeak-ng or flite is not installed."""


def check_engines() -> None:
    """The demo model's data and evaluation use both engines: without flite, training
    would quietly lose a third of its voices and evaluation its unseen flite voice."""
    missing = [name for name in ("espeak-ng", "flite") if shutil.which(name) is None]
    if missing:
        names = " ".join(missing)
        raise MissingSpeechEngine(f"the demo model's voices need {names}: apt-get install {names}")


@dataclass(frozen=True, slots=True)
class Prosody:
    """How fast and how high: 1.0 is the voice's own."""

    tempo: float = 1.0
    pitch: float = 1.0

    @classmethod
    def random(cls, rng: random.Random) -> Prosody:
        return cls(rng.uniform(0.8, 1.25), rng.uniform(0.8, 1.25))


def speak(text: str, voice: Voice, prosody: Prosody = Prosody()) -> np.ndarray:
    """`text` in `voice`, 16 kHz mono float32."""
    if voice.engine == "espeak":
        wav = _espeak(text, voice.name, prosody)
    elif voice.engine == "flite":
        wav = _flite(text, voice.name, prosody)
    else:
        raise ValueError(f"unknown speech engine {voice.engine!r}")
    audio, rate = sf.read(io.BytesIO(wav), dtype="float32")
    if audio.ndim > 1:
        audio = audio.mean(axis=1)
    if rate != SAMPLE_RATE:
        audio = soxr.resample(audio, rate, SAMPLE_RATE, quality="HQ")
    return np.ascontiguousarray(audio, dtype=np.float32)


def _espeak(text: str, name: str, prosody: Prosody) -> bytes:
    speed, pitch = round(165 * prosody.tempo), round(50 * prosody.pitch)
    command = ["espeak-ng", "--stdout", "-v", name, "-s", str(speed), "-p", str(pitch), text]
    wav = bytearray(subprocess.run(command, check=True, capture_output=True).stdout)
    # On a pipe espeak-ng cannot seek back to fill in the header's sizes: set them.
    wav[4:8] = (len(wav) - 8).to_bytes(4, "little")
    wav[40:44] = (len(wav) - 44).to_bytes(4, "little")
    return bytes(wav)


def _flite(text: str, name: str, prosody: Prosody) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "flite.wav"
        subprocess.run(
            [
                "flite",
                "-voice",
                name,
                "--setf",
                f"duration_stretch={1 / prosody.tempo:.3f}",
                "--setf",
                f"int_f0_target_mean={round(110 * prosody.pitch)}",
                "-t",
                text,
                "-o",
                str(out),
            ],
            check=True,
            capture_output=True,
        )
        return out.read_bytes()
