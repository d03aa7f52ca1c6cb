"""A v1 stream handed from a worker that is being replaced to the one its client resumes on.

A retiring worker ends each resumable stream's utterance in flight where the audio stops,
sends every final it owes, and hands the stream over (`Handover`: what a new session needs
to go on as the same stream) to the supervisor, which gives it to the worker the client's
resume lands on. That worker's session starts from the handed position: `Shift` moves
its events onto the stream's clock and numbering, so the client sees one stream.

Sans-I/O: plain records and a pure event map.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from streaming.events import (
    Cleared,
    Committed,
    Failed,
    Final,
    Partial,
    SessionEvent,
    SpeakerTurn,
    SpeechStarted,
    SpeechStopped,
)


@dataclass(frozen=True, slots=True)
class Handover:
    """A stream as its retiring worker leaves it: its names, the client's `start`, the
    audio taken (frames at the stream's rate) and its length in ms, the next utterance's
    number, and the finals (and failures) handed out last, for a client that lost them."""

    session_id: str
    key: str  # its name host-wide (server.http.tenants.stream_key)
    stream_id: str
    start_text: str | None
    samples: int
    clock_ms: int
    next_utt_id: int
    finals: tuple[Final | Failed, ...]


@dataclass(frozen=True, slots=True)
class Shift:
    """Events of a session that took a stream over, as the stream's: utterances numbered
    on from `utt_ids`, times on from `ms`."""

    utt_ids: int
    ms: int

    def __call__(self, event: SessionEvent) -> SessionEvent:
        match event:
            case SpeechStarted():
                return replace(
                    event, utt_id=self.stream_utt_id(event.utt_id), start_ms=self._t(event.start_ms)
                )
            case SpeechStopped() | Partial() | Committed() | Failed():
                return replace(
                    event,
                    utt_id=self.stream_utt_id(event.utt_id),
                    start_ms=self._t(event.start_ms),
                    end_ms=self._t(event.end_ms),
                )
            case Final():
                return self._final(event)
            case Cleared() if event.utt_id is not None:
                return replace(event, utt_id=self.stream_utt_id(event.utt_id))
        return event

    def _final(self, event: Final) -> Final:
        decided = None if event.decided_ms is None else self._t(event.decided_ms)
        turns = tuple(
            SpeakerTurn(t.speaker, self._t(t.start_ms), self._t(t.end_ms))
            for t in event.speaker_turns
        )
        return replace(
            event,
            utt_id=self.stream_utt_id(event.utt_id),
            start_ms=self._t(event.start_ms),
            end_ms=self._t(event.end_ms),
            decided_ms=decided,
            speaker_turns=turns,
        )

    def stream_utt_id(self, utt_id: int) -> int:
        """The stream's number for the session's utterance `utt_id`."""
        return utt_id + self.utt_ids

    def _t(self, ms: int) -> int:
        return ms + self.ms
