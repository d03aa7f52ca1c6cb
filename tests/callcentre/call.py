"""A two-party telephone call from espeak speech: two voices, overlapping turns, 8 kHz μ-law.

The agent is channel 0 and the customer channel 1; each channel holds only its own
party's speech, as a call recorder's stereo tap does, and the turns overlap in time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from streaming.audio.decoder import AudioDecoder, AudioFormat
from tools.g711 import encode_mulaw
from tools.speech import synthesize

RATE = 8000
LABELS = ("agent", "customer")
AGENT, CUSTOMER = "en-us", "en-gb+f3"

#: (channel, voice, start second, text): the customer barges in on both agent turns;
#: both parties are silent from about 6.3 s to 7.5 s (where a test may pause the call).
TURNS: tuple[tuple[int, str, float, str], ...] = (
    (0, AGENT, 0.4, "Thank you for calling, how can I help you today?"),
    (1, CUSTOMER, 2.6, "Hello, my internet has been down since this morning."),
    (0, AGENT, 7.5, "I am sorry to hear that, let me look at your line."),
    (1, CUSTOMER, 9.7, "Thank you, it is the router."),
)
#: A span of the call where neither party speaks.
QUIET = (6.5, 7.2)
TAIL_S = 1.5


@dataclass(frozen=True)
class Call:
    """The call's two channels as μ-law, and where each party speaks."""

    channels: tuple[bytes, bytes]  # mono μ-law at 8 kHz, one per channel
    spans: tuple[tuple[int, float, float], ...]  # (channel, start s, end s) of speech

    @property
    def seconds(self) -> float:
        return len(self.channels[0]) / RATE

    def stereo(self) -> bytes:
        """Interleaved stereo μ-law frames: agent, customer, agent, …"""
        both = np.stack([np.frombuffer(c, np.uint8) for c in self.channels], axis=1)
        return both.tobytes()

    def heard(self, channel: int) -> np.ndarray:
        """Channel `channel` as the server hears it: 16 kHz float, decoded in one piece."""
        decoder = AudioDecoder(AudioFormat("mulaw", RATE, 1))
        return np.concatenate([decoder.decode(self.channels[channel]), decoder.flush()])


def make_call(cache: Path) -> Call:
    """The standard two-party call (speech cached in `cache`)."""
    voices = [_speak(text, voice, cache) for _, voice, _, text in TURNS]
    end = max(start + len(v) / RATE for (_, _, start, _), v in zip(TURNS, voices, strict=True))
    total = int((end + TAIL_S) * RATE)
    tracks = [np.zeros(total, np.float32), np.zeros(total, np.float32)]
    spans = []
    for (channel, _, start, _), voice in zip(TURNS, voices, strict=True):
        at = int(start * RATE)
        tracks[channel][at : at + len(voice)] += voice
        spans.append((channel, start, start + len(voice) / RATE))
    return Call((encode_mulaw(tracks[0]), encode_mulaw(tracks[1])), tuple(spans))


def _speak(text: str, voice: str, cache: Path) -> np.ndarray:
    audio, rate = sf.read(str(synthesize(text, voice, cache, rate=RATE)), dtype="float32")
    if rate != RATE:
        raise ValueError(f"espeak gave {rate} Hz, not {RATE}")
    return 0.7 * audio / max(float(np.abs(audio).max()), 1e-6)
