"""The (batch, frames) shapes CUDA graphs are captured for, and which one a batch runs in.

A captured graph replays one fixed shape, so small batches are padded up to the nearest
planned bucket: in time with zero frames past each item's length (the encoder's masks keep
them out of every real frame: attention scores are masked, the FSMN memory multiplies them
by zero), and in batch with empty rows whose results are dropped. Batches no bucket holds
run eagerly. Pure policy: no torch here, so the scheduler's cost model can use it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

#: Batch sizes captured by default: graphs pay where kernel launches dominate, small batches.
DEFAULT_BATCHES = (1, 2, 4, 8, 16)
#: The shortest bucket, in LFR frames (about 1 s at 16.7 frames a second).
MIN_FRAMES = 16
#: Each length bucket is at most this much longer than the one before (or one alignment step,
#: for the shortest): padding is at most a fifth of what a padded item runs, which costs
#: nothing while kernel launches, not arithmetic, bound the time.
GROWTH = 1.25
#: Bucket lengths are multiples of this (tensor-core friendly shapes).
ALIGN_FRAMES = 8


@dataclass(frozen=True, slots=True, order=True)
class Bucket:
    """One captured shape: `batch` items of `frames` feature frames (prompts not counted)."""

    batch: int
    frames: int


@dataclass(frozen=True, slots=True)
class BucketPlan:
    """The buckets of one device, as a grid of batch sizes by lengths."""

    batches: tuple[int, ...]
    lengths: tuple[int, ...]

    def __post_init__(self) -> None:
        for name, values in (("batches", self.batches), ("lengths", self.lengths)):
            if not values or any(v < 1 for v in values) or list(values) != sorted(set(values)):
                raise ValueError(f"bucket {name} must be distinct positive ascending; got {values}")

    @property
    def buckets(self) -> tuple[Bucket, ...]:
        """Every bucket, largest first (the order to capture them in, so that the shared
        memory pool is sized once, by the first)."""
        grid = [Bucket(b, t) for b in self.batches for t in self.lengths]
        return tuple(sorted(grid, key=lambda k: (k.batch * k.frames, k), reverse=True))

    def choose(self, batch: int, frames: int) -> Bucket | None:
        """The smallest bucket holding `batch` items of up to `frames` frames; None: eager."""
        if batch < 1 or frames < 1:
            raise ValueError(f"a batch has at least one item of one frame; got {batch}x{frames}")
        b = next((x for x in self.batches if x >= batch), None)
        t = next((x for x in self.lengths if x >= frames), None)
        return None if b is None or t is None else Bucket(b, t)

    def padded(self, batch: int, frames: int) -> tuple[int, int]:
        """The shape a batch actually runs at: its bucket's, or its own when eager."""
        bucket = self.choose(batch, frames)
        return (batch, frames) if bucket is None else (bucket.batch, bucket.frames)


def plan_buckets(
    max_frames: int,
    batches: Sequence[int] = DEFAULT_BATCHES,
    *,
    min_frames: int = MIN_FRAMES,
    growth: float = GROWTH,
) -> BucketPlan:
    """Lengths from `min_frames` growing by at most `growth` up to `max_frames` (the
    longest utterance live traffic sends), each rounded up to `ALIGN_FRAMES`."""
    if max_frames < 1 or min_frames < 1 or growth <= 1.0:
        raise ValueError("max_frames and min_frames must be positive and growth above 1")
    top = _aligned(max_frames)
    lengths = [min(_aligned(min_frames), top)]
    while lengths[-1] < top:
        lengths.append(
            min(top, max(lengths[-1] + ALIGN_FRAMES, _aligned_down(lengths[-1] * growth)))
        )
    return BucketPlan(tuple(sorted(set(batches))), tuple(lengths))


def _aligned(frames: float) -> int:
    return -(-int(frames) // ALIGN_FRAMES) * ALIGN_FRAMES


def _aligned_down(frames: float) -> int:
    return int(frames) // ALIGN_FRAMES * ALIGN_FRAMES


@runtime_checkable
class Bucketed(Protocol):
    """A backend that replays CUDA graphs for the buckets of a plan."""

    @property
    def graph_plan(self) -> BucketPlan | None:
        """The plan its graphs were captured for; None when every batch runs eagerly."""
        ...

    def eager(self) -> AbstractContextManager[None]:
        """Run every batch eagerly meanwhile (memory calibration measures eager peaks)."""
        ...
