"""Segmenter: VAD boundaries in, utterances out, with pre-roll, minimum length and forced cuts.

It is driven block by block: after each fixed-size block of audio the caller passes the
VAD's events for it and the stream position. Decisions depend only on that sequence, so
they do not depend on how a client chunked its audio.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from engine.types import SAMPLE_RATE
from streaming.vad.types import VadEvent, VadEventKind


@dataclass(frozen=True, slots=True)
class SegmenterConfig:
    """Utterance shaping on top of the VAD (all in milliseconds)."""

    max_segment_ms: int = 15_000
    min_speech_ms: int = 250
    preroll_ms: int = 100

    def __post_init__(self) -> None:
        if self.max_segment_ms < 1000:
            raise ValueError("max_segment_ms must be at least 1000")
        if not 0 <= self.min_speech_ms < self.max_segment_ms:
            raise ValueError("min_speech_ms must be within 0..max_segment_ms")
        if not 0 <= self.preroll_ms <= 2000:
            raise ValueError("preroll_ms must be within 0..2000")

    @property
    def max_samples(self) -> int:
        return self.max_segment_ms * SAMPLE_RATE // 1000

    @property
    def min_samples(self) -> int:
        return self.min_speech_ms * SAMPLE_RATE // 1000

    @property
    def preroll_samples(self) -> int:
        return self.preroll_ms * SAMPLE_RATE // 1000


class SegmentEventKind(enum.Enum):
    STARTED = "started"
    ENDED = "ended"


@dataclass(frozen=True, slots=True)
class SegmentEvent:
    """An utterance opened or closed, in absolute samples.

    `discarded` marks a closed utterance whose detected speech was shorter than
    min_speech_ms: it gets an empty final without a decode.
    """

    kind: SegmentEventKind
    utt_id: int
    start: int
    end: int = -1
    forced: bool = False
    discarded: bool = False


class Segmenter:
    """Turns speech boundaries into contiguous, bounded utterances."""

    def __init__(self, config: SegmenterConfig) -> None:
        self._config = config
        self._next_id = 0
        self._start: int | None = None  # open utterance's first sample (pre-roll included)
        self._speech_start = 0  # where the VAD heard speech begin, for min_speech
        self._last_end = 0  # utterances never overlap: pre-roll stops here
        self._in_speech = False  # between the VAD's speech start and end

    @property
    def open_start(self) -> int | None:
        """First sample of the open utterance, or None."""
        return self._start

    @property
    def open_utt_id(self) -> int | None:
        return None if self._start is None else self._next_id

    def block(self, events: list[VadEvent], position: int, floor: int) -> list[SegmentEvent]:
        """Apply one block's VAD events; `position` is the stream end after the block.

        `floor` is the oldest sample still buffered, so pre-roll never reaches past it.
        """
        out: list[SegmentEvent] = []
        for event in events:
            self._cut_until(event.sample, out)
            self._in_speech = event.kind is VadEventKind.SPEECH_START
            if event.kind is VadEventKind.SPEECH_START and self._start is None:
                preroll = event.sample - self._config.preroll_samples
                self._open(max(preroll, self._last_end, floor, 0), event.sample, out)
            elif event.kind is VadEventKind.SPEECH_END and self._start is not None:
                self._close(max(event.sample, self._start), out, forced=False)
        self._cut_until(position, out)
        return out

    def finish(self, position: int) -> list[SegmentEvent]:
        """End of stream: the open utterance becomes final at the stream's end."""
        out: list[SegmentEvent] = []
        if self._start is not None:
            self._close(max(position, self._start), out, forced=False)
        return out

    def open_unless_open(self, position: int) -> list[SegmentEvent]:
        """Client turn detection: new audio opens an utterance where the last one ended."""
        out: list[SegmentEvent] = []
        if self._start is None:
            start = min(self._last_end, position)
            self._open(start, start, out)
        return out

    def commit(self, position: int) -> list[SegmentEvent]:
        """The client ends the turn at `position`; speech still under way opens the next."""
        out: list[SegmentEvent] = []
        if self._start is not None:
            self._close(max(position, self._start), out, forced=False)
        if self._in_speech:
            self._open(position, position, out)
        return out

    def clear(self, position: int) -> tuple[int | None, list[SegmentEvent]]:
        """Drop the open utterance unheard; returns its id and any utterance reopened."""
        dropped = self.open_utt_id
        if dropped is not None:
            self._next_id += 1
            self._start = None
        self._last_end = max(self._last_end, position)
        out: list[SegmentEvent] = []
        if self._in_speech:
            self._open(position, position, out)
        return dropped, out

    def _cut_until(self, position: int, out: list[SegmentEvent]) -> None:
        # Long speech is cut at exactly max length; the next utterance starts at the cut.
        while self._start is not None and position - self._start >= self._config.max_samples:
            cut = self._start + self._config.max_samples
            self._close(cut, out, forced=True)
            self._open(cut, cut, out)

    def _open(self, start: int, speech_start: int, out: list[SegmentEvent]) -> None:
        self._start = start
        self._speech_start = speech_start
        out.append(SegmentEvent(SegmentEventKind.STARTED, self._next_id, start))

    def _close(self, end: int, out: list[SegmentEvent], forced: bool) -> None:
        start = self._start
        if start is None:
            return
        too_short = end - self._speech_start < self._config.min_samples
        short = end <= start or (not forced and too_short)
        out.append(SegmentEvent(SegmentEventKind.ENDED, self._next_id, start, end, forced, short))
        self._next_id += 1
        self._last_end = max(self._last_end, end)
        self._start = None
