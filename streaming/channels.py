"""A multichannel stream: one Session per channel, one command stream in, one event stream out.

A call-centre tap carries the agent on one channel and the customer on the other; mixed to
mono, overlapping speech becomes one garbled utterance. Here each channel gets its own VAD,
utterances, partials and finals (each event carries its `channel`), while the group keeps
the stream's single configuration, error and end. Channels batch together in the engine:
their requests are ordinary requests of per-channel session ids (`<id>/<channel>`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from engine.types import InferenceRequest, InferenceResult
from streaming.audio.decoder import AudioFormat
from streaming.commands import Audio, Command, Configure, Mark
from streaming.errors import InvalidFieldError, ProtocolError, StateError
from streaming.events import (
    Acked,
    Configured,
    Ended,
    ErrorEvent,
    Final,
    HandOff,
    Marked,
    Resumed,
    SessionEvent,
)
from streaming.redaction.stream import SpokenContext
from streaming.session import Session, SessionConfig
from streaming.vad.types import VadModel

#: Events that belong to the stream as a whole, not to one channel (the group makes its
#: own errors and end; channels are never aborted one by one).
_GROUP_EVENTS = (Configured, Ended, ErrorEvent, Marked, Acked, Resumed, HandOff)


def channel_session_id(session_id: str, channel: int) -> str:
    return f"{session_id}/{channel}"


class ChannelSplitter:
    """Interleaved frames of N channels → N byte streams, carrying partial frames over."""

    def __init__(self, fmt: AudioFormat) -> None:
        self.channels = fmt.channels
        self._width = fmt.sample_width
        self._pending = b""

    def split(self, data: bytes) -> list[bytes]:
        buf = self._pending + data if self._pending else data
        frame = self._width * self.channels
        whole = len(buf) - len(buf) % frame
        self._pending = bytes(buf[whole:])
        samples = np.frombuffer(buf[:whole], np.uint8).reshape(-1, self.channels, self._width)
        return [samples[:, c, :].tobytes() for c in range(self.channels)]


class ChannelGroup:
    """The Session interface over one Session per channel of a stream.

    `labels` names the channels (their number is the stream's channel count).
    """

    def __init__(
        self, session_id: str, config: SessionConfig, vad_model: VadModel, labels: Sequence[str]
    ) -> None:
        if len(labels) < 2:
            raise InvalidFieldError("a multichannel stream needs at least two channels")
        self.session_id = session_id
        self.labels = tuple(labels)
        # Channels judge their speech inline: a deferred VAD is a single stream's for now.
        inline = replace(config, defer_vad=False)
        # One call's channels redact with one memory of what was said: the agent asks
        # for the security code on one channel, the customer answers on the other.
        spoken = SpokenContext()
        self.channels = tuple(
            Session(channel_session_id(session_id, c), inline, vad_model, spoken)
            for c in range(len(labels))
        )
        self._by_id = {s.session_id: c for c, s in enumerate(self.channels)}
        self._splitter: ChannelSplitter | None = None
        self._events: list[SessionEvent] = []
        self._ended = False

    @property
    def engine_ids(self) -> tuple[str, ...]:
        """The session ids the engine sees: one per channel."""
        return tuple(s.session_id for s in self.channels)

    def handle(self, command: Command, now: float) -> None:
        """Apply one command to every channel (audio split by channel)."""
        if isinstance(command, Mark):
            if not self._ended:  # one answer for the stream, not one per channel
                self._events.append(Marked(command.token))
            return
        if isinstance(command, Configure):
            self._configure(command, now)
        elif isinstance(command, Audio):
            self._audio(command, now)
        else:
            for session in self.channels:
                session.handle(command, now)
        self._collect()

    def _audio(self, command: Audio, now: float) -> None:
        if self._splitter is None:
            fmt = AudioFormat(channels=len(self.channels))
            self._configure(Configure(fmt, channel_labels=self.labels), now)
        if command.channel is not None:
            if not 0 <= command.channel < len(self.channels):
                raise InvalidFieldError(f"this stream has no channel {command.channel}")
            self.channels[command.channel].handle(Audio(command.data), now)
            return
        splitter = self._splitter
        if splitter is not None:
            for session, data in zip(self.channels, splitter.split(command.data), strict=True):
                session.handle(Audio(data), now)

    def receive_result(self, result: InferenceResult, now: float) -> None:
        channel = self._by_id.get(result.ref.session_id)
        if channel is not None:
            self.channels[channel].receive_result(result, now)
            self._collect()

    def end_of_stream(self, now: float) -> None:
        for session in self.channels:
            session.end_of_stream(now)
        self._collect()

    def abort(self, error: ProtocolError, now: float) -> None:
        if not self._ended:
            self._events.append(ErrorEvent(error.code, error.message))
        self.end_of_stream(now)

    def reject(self, error: ProtocolError) -> None:
        if not self._ended:
            self._events.append(ErrorEvent(error.code, error.message))

    def events_to_send(self) -> list[SessionEvent]:
        events, self._events = self._events, []
        return events

    def release_held(self) -> list[Final]:
        """Each channel's held finals, tagged with their channel."""
        return [
            replace(event, channel=c)
            for c, session in enumerate(self.channels)
            for event in session.release_held()
        ]

    def requests_to_submit(self) -> list[InferenceRequest]:
        return [r for session in self.channels for r in session.requests_to_submit()]

    @property
    def finished(self) -> bool:
        return self._ended

    @property
    def stopped(self) -> bool:
        return all(s.stopped for s in self.channels)

    @property
    def owed_finals(self) -> int:
        return sum(s.owed_finals for s in self.channels)

    @property
    def accepting(self) -> bool:
        """The next frame feeds every channel: it is read once each can take it."""
        return all(s.accepting for s in self.channels)

    @property
    def resume_at(self) -> float:
        return max(s.resume_at for s in self.channels)

    @property
    def wake_at(self) -> float | None:
        return min((t for s in self.channels if (t := s.wake_at) is not None), default=None)

    def tick(self, now: float) -> None:
        for session in self.channels:
            session.tick(now)
        self._collect()

    def _configure(self, command: Configure, now: float) -> None:
        fmt = command.audio
        if fmt.channels != len(self.channels):
            raise InvalidFieldError(
                f"this stream has {len(self.channels)} channels; the audio format has "
                f"{fmt.channels}"
            )
        if command.channel_labels not in ((), self.labels):
            raise StateError("the channel layout is fixed once the stream has started")
        mono = Configure(
            replace(fmt, channels=1),
            command.options,
            stream_id=command.stream_id,
            webhook_url=command.webhook_url,
        )
        for session in self.channels:  # all or none: no channel may be left half changed
            session.check_configure(mono)
        for session in self.channels:
            session.handle(mono, now)
        if self._splitter is None:
            self._splitter = ChannelSplitter(fmt)

    def _collect(self) -> None:
        """Channel events, tagged with their channel; the group's own events once."""
        for channel, session in enumerate(self.channels):
            for event in session.events_to_send():
                if isinstance(event, Configured) and channel == 0:
                    # One for the stream, naming its own (multichannel) format.
                    self._events.append(self._configured(event))
                elif not isinstance(event, _GROUP_EVENTS):
                    self._events.append(replace(event, channel=channel))
        if not self._ended and all(s.finished for s in self.channels):
            self._ended = True
            self._events.append(Ended())

    def _configured(self, event: Configured) -> Configured:
        audio = replace(event.audio, channels=len(self.channels))
        # Channel sessions are named `<id>/<c>`; the stream is named after the group.
        stream_id = self.session_id if event.stream_id == event.session_id else event.stream_id
        return replace(
            event,
            session_id=self.session_id,
            audio=audio,
            channel_labels=self.labels,
            stream_id=stream_id,
        )
