"""What each simulated client sends: speech and silence frames, decided before the run."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from tools.bench.capacity.config import BenchConfig
from tools.bench.capacity.corpus import FRAME_MS, Clip, silence_frames
from tools.speech import SAMPLE_RATE


@dataclass(frozen=True, slots=True)
class Utterance:
    """Speech a stream sends: frame indices and its span on the stream clock."""

    first_frame: int
    last_frame: int
    start_ms: float
    end_ms: float


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """Everything one client sends, decided before the run."""

    start_delay_s: float
    frames: tuple[bytes, ...]
    utterances: tuple[Utterance, ...]


def plan_stream(
    rng: random.Random,
    pool: Sequence[Clip],
    silence: Sequence[bytes],
    config: BenchConfig,
    start_delay_s: float,
) -> StreamPlan:
    """Silence, then utterances with gaps chosen so speech is `speech_ratio` of the time."""
    total = int(config.duration_s * 1000 / FRAME_MS)
    ratio = config.speech_ratio
    tail = math.ceil((config.end_silence_ms + 1000) / FRAME_MS)  # the VAD closes the last one
    min_gap = math.ceil((config.end_silence_ms + 500) / FRAME_MS)
    shortest = min(len(c.frames) for c in pool)
    mean_cycle = sum(len(c.frames) for c in pool) / len(pool) / ratio
    first_max = max(2, min(int(mean_cycle), total - tail - shortest))
    position = rng.randint(2, first_max)
    frames: list[bytes] = [silence[i % len(silence)] for i in range(position)]
    utterances: list[Utterance] = []
    while True:
        fits = [c for c in pool if position + len(c.frames) + tail <= total]
        if not fits:
            break
        clip = rng.choice(fits)
        utterances.append(
            Utterance(
                first_frame=position,
                last_frame=position + len(clip.frames) - 1,
                start_ms=position * FRAME_MS,
                end_ms=position * FRAME_MS + clip.samples * 1000 / SAMPLE_RATE,
            )
        )
        frames.extend(clip.frames)
        gap = max(min_gap, round(len(clip.frames) * (1 - ratio) / ratio * rng.uniform(0.5, 1.5)))
        frames.extend(silence[(position + i) % len(silence)] for i in range(gap))
        position += len(clip.frames) + gap
    frames.extend(silence[i % len(silence)] for i in range(max(0, total - len(frames))))
    return StreamPlan(start_delay_s, tuple(frames[:total]), tuple(utterances))


def plan_streams(count: int, pool: Sequence[Clip], config: BenchConfig) -> list[StreamPlan]:
    """Independent plans (stream i's is the same at every N), starts spread over the ramp."""
    rng = random.Random(config.seed)
    silence = silence_frames(config.seed)
    ramp = min(config.ramp_s, config.duration_s / 4)
    return [plan_stream(rng, pool, silence, config, ramp * i / count) for i in range(count)]


def speech_seconds(plans: Sequence[StreamPlan]) -> float:
    """The speech all the plans send together."""
    return sum(u.end_ms - u.start_ms for p in plans for u in p.utterances) / 1000
