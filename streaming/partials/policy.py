"""When to ask for a partial decode of the utterance so far, and how much audio it takes.

A partial of the whole utterance re-decodes everything said so far, so with a fixed
interval the decode work per utterance grows with the square of its length. Two limits
bound it: the adaptive cadence stretches the interval in proportion to the utterance's
length while it is short, and `hold_ms` (see `streaming.partials.window`) caps each
partial's audio once it is long.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.types import SAMPLE_RATE


@dataclass(frozen=True, slots=True)
class PartialPolicy:
    """Partial cadence: `interval_ms` at first, then (if adaptive) growing with length."""

    interval_ms: int = 400
    adaptive: bool = True
    growth: float = 0.25
    max_interval_ms: int = 2000
    # A partial re-decodes only from a little before its settled text: the text of audio
    # older than `hold_ms` behind the live edge is settled. 0 re-decodes the whole utterance.
    hold_ms: int = 2000
    context_ms: int = 500

    def __post_init__(self) -> None:
        if not 100 <= self.interval_ms <= self.max_interval_ms:
            raise ValueError("interval_ms must be within 100..max_interval_ms")
        if not 0.0 < self.growth <= 4.0:
            raise ValueError("growth must be within (0, 4]")
        if self.hold_ms < 0 or self.context_ms < 0:
            raise ValueError("hold_ms and context_ms must be >= 0")

    def interval_samples(self, utterance_samples: int) -> int:
        """Samples of new audio to wait for before the next partial."""
        base = self.interval_ms * SAMPLE_RATE // 1000
        if not self.adaptive:
            return base
        cap = self.max_interval_ms * SAMPLE_RATE // 1000
        return min(cap, max(base, int(self.growth * utterance_samples)))

    def due(self, start: int, last_partial: int, position: int) -> bool:
        """Whether a partial of [start, position) is due, the last one having ended there."""
        return position - last_partial >= self.interval_samples(last_partial - start)
