"""Memory budget and the cost model that prices a batch in bytes.

The budget is measured (or set) once; after that admission is integer bookkeeping, as in
vLLM's block manager: `allocate` returns None when a batch does not fit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from engine.model.prompts import PROMPT_FRAMES

GIB = 1 << 30
#: (batch, frames) -> the (batch, frames) a batch really runs at, e.g. its CUDA graph bucket.
Shape = Callable[[int, int], tuple[int, int]]
UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """'4GiB', '512MB', '1.5g' or a plain byte count, as bytes (binary units)."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(?:i?b)?\s*", text.lower())
    if match is None:
        raise ValueError(f"not a size: {text!r} (try 4GiB or 512MiB)")
    value = float(match.group(1)) * UNITS[match.group(2)]
    if value <= 0:
        raise ValueError("a memory size must be positive")
    return int(value)


@dataclass(frozen=True, slots=True)
class Architecture:
    """The dimensions that drive activation memory."""

    hidden: int = 512
    heads: int = 4
    ffn: int = 2048
    vocab: int = 25055
    feature_dim: int = 560
    dtype_bytes: int = 4


class CostModel:
    """Bytes of activation memory a batch of `batch` items padded to `frames` needs.

    Derived from the architecture (the largest live tensors of one encoder layer, the
    attention scores, and the CTC logits before the argmax) and scaled by a factor that
    warm-up calibrates against measured peaks and out-of-memory errors raise.
    """

    def __init__(
        self, arch: Architecture, scale: float = 1.0, overhead: int = 0, shape: Shape | None = None
    ) -> None:
        self.arch = arch
        self.scale = scale
        self.overhead = overhead
        # A batch that runs padded (to a CUDA graph's bucket) is priced at what it runs.
        self.shape = shape

    def raw_bytes(self, batch: int, frames: int) -> int:
        """The architecture's estimate, before calibration."""
        a = self.arch
        t = frames + PROMPT_FRAMES
        per_frame = (
            a.feature_dim  # input
            + 6 * a.hidden  # residual, norm, q/k/v, fsmn memory
            + a.ffn  # feed-forward hidden
            + a.vocab  # CTC logits, reduced on device to one id
        )
        attention = 2 * a.heads * t * t  # scores and softmax
        return batch * (t * per_frame + attention) * a.dtype_bytes

    def bytes(self, batch: int, frames: int) -> int:
        if self.shape is not None:
            batch, frames = self.shape(batch, frames)
        return int(self.raw_bytes(batch, frames) * self.scale) + self.overhead

    def calibrate(self, measured: list[tuple[int, int, int]]) -> None:
        """Raise the scale to cover (batch, frames, measured peak bytes) samples.

        Never lowers it: a process-RSS delta undercounts whenever the allocator reuses
        memory it already holds, so a small measurement proves nothing.
        """
        ratios = [peak / self.raw_bytes(b, t) for b, t, peak in measured if peak > 0]
        if ratios:
            self.scale = max(self.scale, max(ratios) * 1.1)

    def be_more_conservative(self, factor: float = 1.25) -> None:
        """After an out-of-memory error: price every batch higher from now on."""
        self.scale *= factor


@dataclass(frozen=True, slots=True)
class Allocation:
    """A reservation against the budget; give it back with `MemoryBudget.free`."""

    nbytes: int


class MemoryBudget:
    """A fixed number of bytes shared by every batch in flight."""

    def __init__(self, total: int) -> None:
        if total <= 0:
            raise ValueError("memory budget must be positive")
        self.total = total
        self.in_use = 0

    def allocate(self, nbytes: int) -> Allocation | None:
        """Reserve `nbytes`, or None when that would exceed the budget."""
        if nbytes < 0:
            raise ValueError("cannot allocate a negative size")
        if self.in_use + nbytes > self.total:
            return None
        self.in_use += nbytes
        return Allocation(nbytes)

    def free(self, allocation: Allocation) -> None:
        self.in_use -= allocation.nbytes
        if self.in_use < 0:
            raise RuntimeError("memory budget freed more than it allocated")

    @property
    def available(self) -> int:
        return self.total - self.in_use
