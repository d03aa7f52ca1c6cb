"""Two-party calls: turn-taking with some overlap, each channel speaking about half the time.

The agent and the customer take turns with the pool's sentences. Most turns follow a short
pause; some start before the other party has finished (crosstalk), which a mixed mono
recording would merge and a per-channel recogniser keeps apart. A channel's own
utterances are always further apart than the VAD's end-silence, so each stays one
utterance, as in the mono benchmark.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tools.bench.calls.audio import RATE, frames, interleave, mulaw
from tools.bench.capacity.corpus import FRAME_MS
from tools.bench.capacity.plan import Utterance
from tools.speech import noise_floor

LABELS = ("agent", "customer")


@dataclass(frozen=True, slots=True)
class TurnShape:
    """How the parties take turns (milliseconds)."""

    overlap_share: float = 0.25  # turns that start before the other party has finished
    overlap_ms: tuple[int, int] = (300, 1500)  # at most half of the turn it cuts into
    pause_ms: tuple[int, int] = (200, 900)  # between turns that do not overlap
    lead_in_ms: tuple[int, int] = (200, 1500)  # silence before the first turn
    min_own_gap_ms: int = 1000  # between one channel's utterances: end-silence + 500 ms
    tail_ms: int = 1500  # after the last turn, for the VAD to close it


@dataclass(frozen=True, slots=True)
class Turn:
    """One utterance of one party: which pool clip, where on the call's clock."""

    channel: int
    clip: int
    start_ms: int
    length_ms: float

    @property
    def end_ms(self) -> float:
        return self.start_ms + self.length_ms


@dataclass(frozen=True, slots=True)
class Call:
    """A call, decided before the run: μ-law bytes per channel and what each one says."""

    channels: tuple[bytes, ...]  # mono μ-law, 8 kHz, equal lengths
    utterances: tuple[tuple[Utterance, ...], ...]  # per channel
    turns: tuple[Turn, ...]

    @property
    def stereo_frames(self) -> tuple[bytes, ...]:
        return frames(interleave(self.channels), len(self.channels))

    def mono_frames(self, channel: int) -> tuple[bytes, ...]:
        return frames(self.channels[channel], 1)


def next_start(rng: random.Random, previous: Turn | None, own_end: float, shape: TurnShape) -> int:
    """Where the next turn may start: after a pause or cutting in, never too close to the
    same party's last utterance."""
    if previous is None:
        return rng.randint(*shape.lead_in_ms)
    if rng.random() < shape.overlap_share:
        deepest = min(shape.overlap_ms[1], previous.length_ms / 2)
        gap = -rng.uniform(min(shape.overlap_ms[0], deepest), deepest)
    else:
        gap = rng.uniform(*shape.pause_ms)
    return math.ceil(max(previous.end_ms + gap, own_end + shape.min_own_gap_ms))


def plan_turns(
    rng: random.Random, lengths_ms: Sequence[float], duration_ms: int, shape: TurnShape
) -> tuple[Turn, ...]:
    """Alternating turns of random pool clips until the next one no longer fits."""
    turns: list[Turn] = []
    speaker = rng.randrange(2)
    own_end = [-math.inf, -math.inf]
    spoken = [0.0, 0.0]
    previous: Turn | None = None
    while True:
        start = next_start(rng, previous, own_end[speaker], shape)
        fits = [i for i, n in enumerate(lengths_ms) if start + n + shape.tail_ms <= duration_ms]
        if not fits:
            break
        clip = rng.choice(balancing(fits, lengths_ms, spoken[speaker] - spoken[1 - speaker]))
        previous = Turn(speaker, clip, start, lengths_ms[clip])
        turns.append(previous)
        own_end[speaker] = previous.end_ms
        spoken[speaker] += previous.length_ms
        speaker = 1 - speaker
    return tuple(turns)


def balancing(fits: Sequence[int], lengths_ms: Sequence[float], ahead_ms: float) -> list[int]:
    """The shorter half of the clips that fit for a party that has spoken more so far, the
    longer half for one that has spoken less: both parties end near half the call each."""
    ranked = sorted(fits, key=lambda i: lengths_ms[i])
    half = (len(ranked) + 1) // 2
    return ranked[:half] if ahead_ms > 0 else ranked[len(ranked) - half :]


def utterance_of(turn: Turn) -> Utterance:
    """A turn as the latency analysis sees it: the 100 ms frames it spans, and its span."""
    return Utterance(
        first_frame=turn.start_ms // FRAME_MS,
        last_frame=math.ceil(turn.end_ms / FRAME_MS) - 1,
        start_ms=float(turn.start_ms),
        end_ms=turn.end_ms,
    )


def render(
    turns: Sequence[Turn], clips: Sequence[np.ndarray], duration_ms: int, seed: int
) -> tuple[np.ndarray, ...]:
    """Each channel at 8 kHz: a faint noise floor with its party's turns placed on it."""
    samples = duration_ms * RATE // 1000
    tracks = [noise_floor(samples, seed * 2 + c).astype(np.float32) for c in range(2)]
    for turn in turns:
        at = turn.start_ms * RATE // 1000
        clip = clips[turn.clip][: samples - at]
        tracks[turn.channel][at : at + clip.size] += clip
    return tuple(tracks)


def build_call(
    rng: random.Random,
    clips: Sequence[np.ndarray],
    duration_s: float,
    seed: int,
    shape: TurnShape | None = None,
) -> Call:
    """One call from 8 kHz clips: turns, the two channels' μ-law audio, their utterances."""
    duration_ms = round(duration_s * 1000)
    lengths = [c.size * 1000 / RATE for c in clips]
    turns = plan_turns(rng, lengths, duration_ms, shape or TurnShape())
    tracks = render(turns, clips, duration_ms, seed)
    return Call(
        channels=tuple(mulaw(t) for t in tracks),
        utterances=tuple(tuple(utterance_of(t) for t in turns if t.channel == c) for c in range(2)),
        turns=turns,
    )


def build_calls(
    count: int, clips: Sequence[np.ndarray], duration_s: float, seed: int
) -> list[Call]:
    """`count` different calls (call i is the same whatever the count)."""
    return [
        build_call(random.Random(seed * 1000 + i), clips, duration_s, seed * 1000 + i)
        for i in range(count)
    ]


def speech_share(call: Call, channel: int, duration_s: float) -> float:
    """The share of the call's time one channel speaks."""
    spoken = sum(u.end_ms - u.start_ms for u in call.utterances[channel])
    return spoken / 1000 / duration_s


def overlap_ms(call: Call) -> float:
    """How long both parties speak at once, in all."""
    a, b = call.utterances
    return sum(
        max(0.0, min(x.end_ms, y.end_ms) - max(x.start_ms, y.start_ms)) for x in a for y in b
    )
