"""A session's VAD work as a value, so the server can run it off its event loop.

With `SessionConfig.defer_vad`, audio only fills the session's ring: `take_vad_job()`
hands out its whole blocks with the session's detector, the job runs on whichever one
thread the server chooses, and `apply_vad()` brings the verdicts back to the session,
where segmenting, partials and finals go on exactly as if the VAD had run inline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streaming.vad.types import BlockVerdict, StreamingVad, VadEvent, VadModel


@dataclass(frozen=True, slots=True)
class VadStep:
    """What the detector said after one block: its events and the pause's pending end."""

    until: int  # stream sample after the block
    events: tuple[VadEvent, ...]
    pending_end: int | None


class VadJob:
    """Whole blocks of one stream for its detector; run it on one thread at a time."""

    __slots__ = ("_blocks", "_stream", "model")

    def __init__(
        self,
        stream: StreamingVad,
        blocks: tuple[tuple[int, np.ndarray], ...],
        model: VadModel | None = None,
    ) -> None:
        self._stream = stream
        self._blocks = blocks  # (stream sample after the block, its samples), in order
        self.model = model  # the stream's model: a batching one may score jobs together

    @property
    def stream(self) -> StreamingVad:
        return self._stream

    @property
    def samples(self) -> int:
        return sum(samples.size for _, samples in self._blocks)

    def block_samples(self) -> list[np.ndarray]:
        return [samples for _, samples in self._blocks]

    def run(self) -> tuple[VadStep, ...]:
        """Feed every block to the detector; the session must not touch it meanwhile."""
        return self.steps(self._stream.accept_blocks(self.block_samples()))

    def steps(self, verdicts: Sequence[BlockVerdict]) -> tuple[VadStep, ...]:
        """The detector's verdicts on this job's blocks, as steps for the session."""
        return tuple(
            VadStep(until, verdict.events, verdict.pending_end)
            for (until, _), verdict in zip(self._blocks, verdicts, strict=True)
        )
