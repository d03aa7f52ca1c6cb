"""A stream's finals labelled with who spoke, in the order they go out.

An utterance's speech comes with one speaker embedding per decode that makes up its
final: one for a whole-utterance final, one per piece with commits at pauses (so a change
of speaker at a pause inside an utterance is seen). Each is labelled online
(`OnlineSpeakers`) in stream order, which makes the labels a function of the audio alone,
whatever order the engine answered in. The final's `speaker` is the one who spoke longest
in it; `speaker_turns` says who spoke when. A file's labels may be redone at its end
(`streaming.speakers.offline`) from the voices kept (`keep`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from engine.types import SAMPLE_RATE
from streaming.events import Final, SpeakerTurn
from streaming.speakers.online import OnlineSpeakers, SpeakerPolicy


@dataclass(frozen=True, slots=True)
class Voice:
    """A decode's speaker embedding and the stream samples it heard."""

    start: int
    end: int
    vector: np.ndarray

    @property
    def seconds(self) -> float:
        return (self.end - self.start) / SAMPLE_RATE


@dataclass(frozen=True, slots=True)
class Heard:
    """A voice of a final, labelled: who, and how like that speaker (cosine)."""

    voice: Voice
    speaker: str
    score: float


def _ms(samples: int) -> int:
    return samples * 1000 // SAMPLE_RATE


def with_speakers(final: Final, heard: Sequence[Heard]) -> Final:
    """`final` with its speaker (who spoke longest), turns and score, from its labelled
    voices (unchanged if none was heard in it)."""
    turns: list[SpeakerTurn] = []
    scores: dict[str, list[tuple[float, float]]] = {}  # label -> (seconds, score)
    for h in sorted(heard, key=lambda h: h.voice.start):
        scores.setdefault(h.speaker, []).append((h.voice.seconds, h.score))
        # A piece is decoded with some of the pause after it: the final's span bounds it.
        start = max(_ms(h.voice.start), final.start_ms)
        end = min(_ms(h.voice.end), final.end_ms)
        if turns and turns[-1].speaker == h.speaker:
            turns[-1] = replace(turns[-1], end_ms=end)
        else:
            turns.append(SpeakerTurn(h.speaker, start, end))
    if not turns:
        return final
    spoke: dict[str, int] = {}
    for turn in turns:
        spoke[turn.speaker] = spoke.get(turn.speaker, 0) + turn.end_ms - turn.start_ms
    first = {turn.speaker: k for k, turn in reversed(list(enumerate(turns)))}
    main = max(spoke, key=lambda label: (spoke[label], -first[label]))
    weights = scores[main]
    score = sum(w * s for w, s in weights) / max(sum(w for w, _ in weights), 1e-9)
    return replace(final, speaker=main, speaker_turns=tuple(turns), speaker_score=score)


class StreamSpeakers:
    """One stream's speakers: labels its finals' voices as the finals go out."""

    def __init__(self, policy: SpeakerPolicy, keep: bool = False) -> None:
        self._speakers = OnlineSpeakers(policy)
        self._keep = keep
        self.kept: list[tuple[int, Voice]] = []  # (utt_id, voice), with `keep`

    def labelled(self, final: Final, voices: Sequence[Voice]) -> Final:
        """`final` with its speaker and turns (unchanged if no voice was heard in it)."""
        heard = []
        for voice in sorted(voices, key=lambda v: v.start):
            label, score = self._speakers.label(voice.vector, voice.seconds)
            heard.append(Heard(voice, label, score))
            if self._keep:
                self.kept.append((final.utt_id, voice))
        return with_speakers(final, heard)


def turn_index(turns: Sequence[SpeakerTurn], ms: int) -> int:
    """Which turn stream time `ms` falls in: the one holding it, else the nearest."""

    def distance(k: int) -> int:
        turn = turns[k]
        if turn.start_ms <= ms < turn.end_ms:
            return 0
        return min(abs(ms - turn.start_ms), abs(ms - turn.end_ms))

    return min(range(len(turns)), key=distance)


def turn_at(turns: Sequence[SpeakerTurn], ms: int) -> str | None:
    """Who spoke at stream time `ms` (None: no turns)."""
    return turns[turn_index(turns, ms)].speaker if turns else None
