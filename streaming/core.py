"""A stream's core, chosen by its first command: one Session, or one per channel.

Whether a stream is recognised channel by channel is known only from its first
`Configure` (v1's `start`, Twilio's `start`, AudioHook's `open`), after the connection
exists; this wrapper makes that choice then, and the server drives one interface either way.
"""

from __future__ import annotations

from typing import Protocol

from engine.types import InferenceRequest, InferenceResult
from streaming.channels import ChannelGroup
from streaming.commands import Command, Configure
from streaming.errors import ProtocolError
from streaming.events import Final, SessionEvent
from streaming.session import Session, SessionConfig
from streaming.vad.jobs import VadJob, VadStep
from streaming.vad.types import VadModel


class StreamSession(Protocol):
    """What the server drives: commands and results in, requests and events out."""

    session_id: str

    @property
    def engine_ids(self) -> tuple[str, ...]: ...

    def handle(self, command: Command, now: float) -> None: ...

    def receive_result(self, result: InferenceResult, now: float) -> None: ...

    def end_of_stream(self, now: float) -> None: ...

    def hand_over(self, now: float) -> None: ...

    @property
    def dropped_utt(self) -> int | None: ...

    def abort(self, error: ProtocolError, now: float) -> None: ...

    def reject(self, error: ProtocolError) -> None: ...

    def events_to_send(self) -> list[SessionEvent]: ...

    def release_held(self) -> list[Final]: ...

    @property
    def wake_at(self) -> float | None: ...

    def tick(self, now: float) -> None: ...

    def requests_to_submit(self) -> list[InferenceRequest]: ...

    @property
    def finished(self) -> bool: ...

    @property
    def stopped(self) -> bool: ...

    @property
    def owed_finals(self) -> int: ...

    @property
    def accepting(self) -> bool: ...

    @property
    def resume_at(self) -> float: ...

    def take_vad_job(self) -> VadJob | None: ...

    def apply_vad(self, job: VadJob, steps: tuple[VadStep, ...], now: float) -> None: ...

    @property
    def has_deferred(self) -> bool: ...

    @property
    def in_pause(self) -> bool: ...

    @property
    def judged_ms(self) -> int: ...

    @property
    def settled_ms(self) -> int | None: ...

    def resume(self, now: float) -> None: ...


class SessionCore:
    """A Session, or a ChannelGroup when the first command configures a multichannel stream."""

    def __init__(self, session_id: str, config: SessionConfig, vad_model: VadModel) -> None:
        self.session_id = session_id
        self._config = config
        self._vad_model = vad_model
        self._core: Session | ChannelGroup | None = None

    def _chosen(self, first: Command | None = None) -> Session | ChannelGroup:
        if self._core is None:
            if isinstance(first, Configure) and first.multichannel:
                self._core = ChannelGroup(
                    self.session_id, self._config, self._vad_model, first.channel_labels
                )
            else:
                self._core = Session(self.session_id, self._config, self._vad_model)
        return self._core

    @property
    def engine_ids(self) -> tuple[str, ...]:
        """The session ids the engine sees (one per channel); none before the choice."""
        return () if self._core is None else self._core.engine_ids

    def handle(self, command: Command, now: float) -> None:
        self._chosen(command).handle(command, now)

    def receive_result(self, result: InferenceResult, now: float) -> None:
        self._chosen().receive_result(result, now)

    def end_of_stream(self, now: float) -> None:
        self._chosen().end_of_stream(now)

    def hand_over(self, now: float) -> None:
        """A single stream's hand-over (a channel group's streams are not handed over:
        it ends as at `end_of_stream`)."""
        core = self._chosen()
        if isinstance(core, Session):
            core.hand_over(now)
        else:
            core.end_of_stream(now)

    @property
    def dropped_utt(self) -> int | None:
        return self._core.dropped_utt if isinstance(self._core, Session) else None

    def abort(self, error: ProtocolError, now: float) -> None:
        self._chosen().abort(error, now)

    def reject(self, error: ProtocolError) -> None:
        self._chosen().reject(error)

    def events_to_send(self) -> list[SessionEvent]:
        return [] if self._core is None else self._core.events_to_send()

    def release_held(self) -> list[Final]:
        """The finals redaction holds, out now (the client went away mid-stream)."""
        return [] if self._core is None else self._core.release_held()

    def requests_to_submit(self) -> list[InferenceRequest]:
        return [] if self._core is None else self._core.requests_to_submit()

    @property
    def finished(self) -> bool:
        return self._core is not None and self._core.finished

    @property
    def stopped(self) -> bool:
        return self._core is not None and self._core.stopped

    @property
    def owed_finals(self) -> int:
        return 0 if self._core is None else self._core.owed_finals

    @property
    def accepting(self) -> bool:
        """Whether the client's next frame may be read (backpressure when not)."""
        return self._core is None or self._core.accepting

    @property
    def resume_at(self) -> float:
        """When the client's pace allows its next frame to be read."""
        return float("-inf") if self._core is None else self._core.resume_at

    @property
    def wake_at(self) -> float | None:
        """When time alone gives the stream something to send (see `Session.wake_at`)."""
        return None if self._core is None else self._core.wake_at

    def tick(self, now: float) -> None:
        if self._core is not None:
            self._core.tick(now)

    def take_vad_job(self) -> VadJob | None:
        """A single stream's VAD work (channel groups judge theirs inline)."""
        return self._core.take_vad_job() if isinstance(self._core, Session) else None

    def apply_vad(self, job: VadJob, steps: tuple[VadStep, ...], now: float) -> None:
        if isinstance(self._core, Session):
            self._core.apply_vad(job, steps, now)

    @property
    def has_deferred(self) -> bool:
        return isinstance(self._core, Session) and self._core.has_deferred

    @property
    def in_pause(self) -> bool:
        """Between utterances (a single stream's: a channel group never is)."""
        return isinstance(self._core, Session) and self._core.in_pause

    @property
    def judged_ms(self) -> int:
        return self._core.judged_ms if isinstance(self._core, Session) else 0

    @property
    def settled_ms(self) -> int | None:
        """Where a single stream's unsettled audio begins (`Session.settled_ms`)."""
        return self._core.settled_ms if isinstance(self._core, Session) else None

    def resume(self, now: float) -> None:
        if isinstance(self._core, Session):
            self._core.resume(now)
