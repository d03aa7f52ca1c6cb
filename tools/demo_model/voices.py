"""Synthetic voices: espeak-ng accents and variants, flite's and festival's voices, as
16 kHz float32.

Some voices are never trained on (`UNSEEN`): an espeak accent with a variant that
training never uses, one flite voice and one festival voice, so evaluation can report an
unseen voice.
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
#: The variants the demo model trained on before issue 53; the evaluation sets keep
#: drawing their voices from these, so their numbers stay comparable across models.
BASE_VARIANTS = (
    "m1", "m2", "m3", "m4", "m5", "m7", "m8", "f1", "f2", "f3", "f5",
    "klatt", "klatt2", "klatt3", "Alex", "Andy", "Annie", "adam", "anika", "belinda",
    "benjamin", "david", "ed", "edward", "john", "linda", "max", "michel", "norbert", "paul",
)  # fmt: skip
#: Every other English-capable variant espeak-ng 1.51 ships (m6 is the unseen voice's).
MORE_VARIANTS = (
    "f4", "klatt4", "klatt5", "klatt6", "Alicia", "Andrea", "AnxiousAndy", "Demonic",
    "Denis", "Diogo", "Gene", "Gene2", "Henrique", "Hugo", "Jacky", "Lee", "Marco", "Mario",
    "Michael", "Mike", "Mr serious", "Nguyen", "RicishayMax", "RicishayMax2", "RicishayMax3",
    "Storm", "Tweaky", "UniRobot", "anikaRobot", "announcer", "antonio", "aunty", "boris",
    "caleb", "croak", "edward2", "fast", "grandma", "grandpa", "gustave", "iven", "iven2",
    "iven3", "iven4", "kaukovalta", "marcelo", "miguel", "pablo", "pedro", "quincy", "rob",
    "robert", "robosoft", "robosoft2", "robosoft3", "robosoft4", "robosoft5", "robosoft6",
    "robosoft7", "robosoft8", "sandro", "shelby", "steph", "steph2", "steph3", "travis",
    "victor", "whisper", "whisperf", "zac",
)  # fmt: skip
ESPEAK_VARIANTS = BASE_VARIANTS + MORE_VARIANTS
FLITE_VOICES = ("kal", "kal16", "awb", "slt")
#: Festival's voices by the Scheme function that selects them (Debian packages
#: festvox-kallpc16k and festvox-us-slt-hts); slt is the unseen one.
FESTIVAL_TRAINING = ("kal_diphone",)
FESTIVAL_UNSEEN = "cmu_us_slt_arctic_hts"


@dataclass(frozen=True, slots=True)
class Voice:
    engine: str  # "espeak", "flite" or "festival"
    name: str  # espeak "accent+variant", a flite voice, or a festival voice function

    def __str__(self) -> str:
        return f"{self.engine}:{self.name}"


UNSEEN = (Voice("espeak", "en-029+m6"), Voice("flite", "rms"))
#: Festival's unseen voice: its own evaluation set, so `UNSEEN`'s stays comparable.
UNSEEN_FESTIVAL = Voice("festival", FESTIVAL_UNSEEN)


def training_voices(variants: tuple[str, ...] = ESPEAK_VARIANTS) -> list[Voice]:
    """Every voice training may use (none unseen); flite's and festival's only when they
    are installed. `variants`: the espeak variants to combine with every accent."""
    voices = [Voice("espeak", f"{a}+{v}") for a in ESPEAK_ACCENTS for v in variants]
    if shutil.which("flite"):
        voices += [Voice("flite", v) for v in FLITE_VOICES]
    if shutil.which("text2wave"):
        voices += [Voice("festival", v) for v in FESTIVAL_TRAINING]
    return voices


def evaluation_voices() -> list[Voice]:
    """The seen voices of the evaluation sets: the voices before issue 53, festival's
    excepted, so every model is measured on the same audio."""
    return [v for v in training_voices(BASE_VARIANTS) if v.engine != "festival"]


#: Share of training utterances in a flite voice. flite's four are a few of some fifty
#: voices: drawn uniformly they made 9 % of the data, and at 5,000 steps the unseen flite
#: voice (rms) had 40 % WER against 11 % for the unseen espeak one.
FLITE_SHARE = 0.35
#: Share of training utterances in festival's voice, when festival is installed.
FESTIVAL_SHARE = 0.12


def pick_training_voice(rng: random.Random, pool: list[Voice] | None = None) -> Voice:
    """A training voice: flite's `FLITE_SHARE` of the time when flite is installed,
    festival's `FESTIVAL_SHARE` when it is (drawn after flite's, so a pool without
    festival draws as it always did)."""
    pool = training_voices() if pool is None else pool
    flite = [v for v in pool if v.engine == "flite"]
    if flite and rng.random() < FLITE_SHARE:
        return rng.choice(flite)
    festival = [v for v in pool if v.engine == "festival"]
    if festival and rng.random() < FESTIVAL_SHARE:
        return rng.choice(festival)
    return rng.choice([v for v in pool if v.engine == "espeak"])


class MissingSpeechEngine(RuntimeError):
    """espeak-ng, flite or festival is not installed."""


#: The command each engine needs, and the Debian packages that bring it.
ENGINE_PACKAGES = {
    "espeak-ng": "espeak-ng",
    "flite": "flite",
    "text2wave": "festival festvox-kallpc16k festvox-us-slt-hts",
}


def check_engines() -> None:
    """The demo model's data and evaluation use every engine: without flite, training
    would quietly lose a third of its voices and evaluation its unseen flite voice;
    without festival, its voice and the unseen festival set."""
    missing = [ENGINE_PACKAGES[c] for c in ENGINE_PACKAGES if shutil.which(c) is None]
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
    elif voice.engine == "festival":
        wav = _festival(text, voice.name, prosody)
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


def _festival(text: str, name: str, prosody: Prosody) -> bytes:
    """festival's text2wave. The diphone voice (training's) takes its tempo from
    `prosody`; the HTS voice (the unseen one, evaluated at its own pace) ignores it; pitch
    stays each voice's own (the two kinds set it in different ways)."""
    with tempfile.TemporaryDirectory() as tmp:
        source, out = Path(tmp) / "text.txt", Path(tmp) / "festival.wav"
        source.write_text(text + "\n", encoding="utf-8")
        subprocess.run(
            [
                "text2wave",
                "-eval",
                f"(voice_{name})",
                "-eval",
                f"(Parameter.set 'Duration_Stretch {1 / prosody.tempo:.3f})",
                str(source),
                "-o",
                str(out),
            ],
            check=True,
            capture_output=True,
        )
        return out.read_bytes()
