"""What every voice-activity detector adapter gives the segmenter."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


class VadEventKind(enum.Enum):
    SPEECH_START = "speech_start"
    SPEECH_END = "speech_end"


@dataclass(frozen=True, slots=True)
class VadEvent:
    """A speech boundary at an absolute 16 kHz sample index of the stream."""

    kind: VadEventKind
    sample: int


@dataclass(frozen=True, slots=True)
class VadConfig:
    """Detector settings; end-of-speech silence is always passed explicitly.

    funasr 1.4.16 turns on "dynamic silence" unless it is given, and short segments then
    needed about 2 s of silence to end.
    """

    end_silence_ms: int = 500

    def __post_init__(self) -> None:
        if not 50 <= self.end_silence_ms <= 10_000:
            raise ValueError("end_silence_ms must be within 50..10000")


@dataclass(frozen=True, slots=True)
class BlockVerdict:
    """What a detector said after one block: its boundaries and the pause's pending end."""

    events: tuple[VadEvent, ...]
    pending_end: int | None


class StreamingVad(Protocol):
    """Per-session detector state. Output never depends on how the input was chunked."""

    def accept(self, samples: np.ndarray) -> list[VadEvent]:
        """Feed float32 16 kHz samples; return the boundaries decided so far, in order."""
        ...

    def accept_blocks(self, blocks: Sequence[np.ndarray]) -> list[BlockVerdict]:
        """Feed blocks in order; per block, what `accept` and then `pending_end` would say.

        The same verdicts as block-by-block calls; a detector may score all the blocks
        in one model call (a burst of audio: a replay, or a stream catching up).
        """
        ...

    def flush(self) -> list[VadEvent]:
        """End of stream: decide on what is buffered and close any open speech."""
        ...

    def pending_end(self) -> int | None:
        """Where speech would end if the pause now under way lasts; None when not pausing.

        When the pause does last, the SPEECH_END that follows carries exactly this sample,
        so a caller may decode the utterance before the end-silence has run out.
        """
        ...


class VadModel(Protocol):
    """Shared, loaded-once detector weights that make per-session streams."""

    name: str

    def new_stream(self, config: VadConfig) -> StreamingVad:
        """A fresh per-session detector state sharing this model's weights."""
        ...


@runtime_checkable
class BatchingVadModel(Protocol):
    """A model that scores many of its streams' blocks together, in three steps.

    `prepare` one stream's blocks (its own state: features), `score` many prepared at once
    (the shared model: one call per group that can share it), then `finish` each (its own
    state again: the endpointer). Each step may raise; the caller keeps a stream's fault
    to that stream, and a failed `score` to the group it was given.
    """

    def prepare(self, stream: StreamingVad, blocks: Sequence[np.ndarray]) -> Any: ...

    def score(self, prepared: Sequence[Any]) -> None: ...

    def finish(self, prepared: Any) -> list[BlockVerdict]: ...


def accept_each(stream: StreamingVad, blocks: Sequence[np.ndarray]) -> list[BlockVerdict]:
    """`accept_blocks` for a detector with nothing to gain from seeing blocks together."""
    return [BlockVerdict(tuple(stream.accept(b)), stream.pending_end()) for b in blocks]
