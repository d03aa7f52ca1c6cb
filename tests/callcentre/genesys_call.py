"""The first 11 s of Genesys' AudioHook test call, remade from espeak speech.

Genesys' API test suite streams 11 s of `test-transcript-connector.wav` and checks each
transcript against the spans its reference server finds (`transcript_info` in its
`test/test-data.ts`, ±0.5 s): the customer (`external`, channel 0) at 0.1 s (0.4 s
long), 1.1 s (1.6 s) and 2.9 s (1.2 s), the agent (`internal`, channel 1) at 4.9 s
(1.0 s) and 6.7 s (2.6 s). Here each utterance is placed where the file's own speech is
(by its energy: 0.0-0.6, 1.1-2.9 and 3.3-4.4 s; 5.0-6.0 and 6.8-9.4 s), about as long,
with pauses of at least 0.5 s between a party's turns (the file's gap at 2.9 s is
shorter than any VAD's end silence in its energy alone, but longer in its speech), and
the agent's last turn in one breath, with no pause inside for a VAD to end it on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

from tools.g711 import encode_mulaw
from tools.speech import synthesize

RATE = 8000
SECONDS = 11.0
CHANNELS = ("external", "internal")
#: (channel, voice, espeak speed, start second, text)
TURNS: tuple[tuple[int, str, int, float, str], ...] = (
    (0, "en-us", 180, 0.1, "Hello."),
    (0, "en-us", 230, 1.1, "Thank you for calling support today."),
    (0, "en-us", 160, 3.3, "How can I help you?"),
    (1, "en-gb+f3", 165, 5.0, "My router is down."),
    (1, "en-gb+f3", 170, 6.8, "The internet has been down since early this morning."),
)
#: The spans Genesys' suite expects, in order (`transcript_info`), and its tolerance.
EXPECTED = ((0.1, 0.4), (1.1, 1.6), (2.9, 1.2), (4.9, 1.0), (6.7, 2.6))
TOLERANCE_S = 0.5


def make_genesys_call(cache: Path) -> bytes:
    """Interleaved stereo μ-law at 8 kHz: external, internal, external, …"""
    total = int(SECONDS * RATE)
    tracks = [np.zeros(total, np.float32), np.zeros(total, np.float32)]
    for channel, voice, speed, start, text in TURNS:
        speech = _voiced(synthesize(text, voice, cache, rate=RATE, speed=speed))
        at = int(start * RATE)
        tracks[channel][at : at + len(speech)] += speech[: total - at]
    both = np.stack([np.frombuffer(encode_mulaw(t), np.uint8) for t in tracks], axis=1)
    return both.tobytes()


def _voiced(path: Path) -> np.ndarray:
    """The clip from its first voiced sample to its last, at a telephone level."""
    audio, rate = sf.read(str(path), dtype="float32")
    if rate != RATE:
        raise ValueError(f"espeak gave {rate} Hz, not {RATE}")
    peak = max(float(np.abs(audio).max()), 1e-6)
    voiced = np.nonzero(np.abs(audio) > 0.02 * peak)[0]
    return 0.7 * audio[voiced[0] : voiced[-1] + 1] / peak
