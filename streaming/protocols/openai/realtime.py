"""OpenAI Realtime API transcription sessions at `/v1/realtime`: a sans-I/O codec.

Speaks both dialects the `openai` SDK has: GA (`session.update` with `type:
"transcription"`) and beta (`transcription_session.update`, the `OpenAI-Beta: realtime=v1`
header). Only session events differ between them; the session event answering an update
follows that update's dialect, the first one the header's. Bad client events are reported
with an `error` event and the stream goes on; only errors that end streams anyway (rate,
session length, an oversized message: see `frames`) are fatal.
"""

from __future__ import annotations

import base64
import binascii
import enum
import itertools
import json
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streaming.commands import (
    Audio,
    Clear,
    Command,
    Commit,
    Configure,
    HotwordRefusal,
    hotwords_from,
    writes_any,
)
from streaming.errors import (
    EmptyCommitError,
    FrameTooLargeError,
    InvalidAudioError,
    InvalidFieldError,
    MalformedMessageError,
    ProtocolError,
    ServerFullError,
    SessionLimitError,
    UnknownMessageTypeError,
    UnsupportedHotwordError,
)
from streaming.events import (
    Cleared,
    Committed,
    Configured,
    ErrorEvent,
    Failed,
    Final,
    Partial,
    SessionEvent,
    SpeechStarted,
    SpeechStopped,
    StopCause,
)
from streaming.limits import SessionLimits
from streaming.pins import Pins
from streaming.protocols.base import Frame, Handshake
from streaming.protocols.openai import logprobs
from streaming.protocols.openai.fields import (
    LockedSettingError,
    RealtimeFieldError,
    check_keys,
    required,
    text,
)
from streaming.protocols.openai.frames import MAX_APPEND_REST, read_event
from streaming.protocols.openai.render import render_beta, render_ga, sensevoice_fields
from streaming.protocols.openai.session import (
    RealtimeSettings,
    Transcription,
    parse_beta,
    parse_ga,
    pinned_settings,
)

#: OpenAI's cap on the audio of one `input_audio_buffer.append` (its base64 text).
MAX_AUDIO_CHARS = 15 * 1024 * 1024
#: Room for the JSON around that audio: the library's cap is the sum.
MESSAGE_OVERHEAD = MAX_APPEND_REST
FATAL_ERRORS = (FrameTooLargeError, SessionLimitError, ServerFullError)
#: OpenAI's `error.code` for the session core's codes that have a counterpart.
OPENAI_CODES: Mapping[str, str] = {
    MalformedMessageError.code: "invalid_json",
    UnknownMessageTypeError.code: "invalid_value",
    EmptyCommitError.code: "input_audio_buffer_commit_empty",
    InvalidAudioError.code: "invalid_value",
}
SERVER_FAULTS = frozenset({"internal_error", ServerFullError.code, "slow_client"})
CLIENT_EVENTS = (
    "session.update",
    "transcription_session.update",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
)
TRANSCRIPT = "conversation.item.input_audio_transcription"


class Dialect(enum.Enum):
    GA = "ga"
    BETA = "beta"


def dialect_of(handshake: Handshake) -> Dialect:
    beta = handshake.headers.get("openai-beta", "").replace(" ", "").lower()
    return Dialect.BETA if "realtime=v1" in beta.split(",") else Dialect.GA


@dataclass(frozen=True, slots=True)
class _ErrorNote:
    """What the codec knew of an error it raised, for the `error` event that reports it."""

    code: str
    message: str
    openai_code: str
    param: str | None
    event_id: str | None


def _note(exc: ProtocolError, event_id: str | None) -> _ErrorNote:
    param: str | None = None
    openai_code = OPENAI_CODES.get(exc.code, exc.code)
    if isinstance(exc, RealtimeFieldError | LockedSettingError):
        param, openai_code = exc.param, exc.openai_code
    elif isinstance(exc, UnknownMessageTypeError):
        param = "type"
    return _ErrorNote(exc.code, exc.message, openai_code, param, event_id)


def dump(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class OpenAIRealtimeCodec:
    """One `/v1/realtime` connection: client events to commands, session events to JSON."""

    def __init__(
        self,
        handshake: Handshake,
        limits: SessionLimits,
        ids: str | None = None,
        pinned: Pins | None = None,
        hotword_refusal: HotwordRefusal = writes_any,
    ) -> None:
        self._limits = limits
        self._hotword_refusal = hotword_refusal
        self._dialect = dialect_of(handshake)
        # A client secret's session is where this session starts, and what it fixes stays.
        self._pinned = pinned or Pins()
        model = Transcription(model=handshake.param("model"))
        self._settings = pinned_settings(RealtimeSettings(transcription=model), self._pinned)
        self._ids = ids or uuid.uuid4().hex[:12]  # ids unique across sessions, as OpenAI's
        self._event_ids = itertools.count(1)
        self._audio_flowed = False  # the format and turn detection are fixed from here
        # The core's events carry no client event ids or update dialects: these queues
        # pair each event with what the codec knew when it decoded its cause, in order.
        self._updates: deque[tuple[Dialect, RealtimeSettings]] = deque()
        self._commits: deque[str | None] = deque(maxlen=1024)
        self._errors: deque[_ErrorNote] = deque(maxlen=64)
        self._announced = False
        self._vad = True
        self._logprobs = False  # the session includes the tokens' log-probabilities
        self._sent: dict[int, str] = {}  # per utterance, the text its deltas carried
        self._last_item: str | None = None

    @property
    def max_message_bytes(self) -> int:
        return MAX_AUDIO_CHARS + MESSAGE_OVERHEAD

    @property
    def end_grace_s(self) -> float:
        return 0.0  # the server ends a Realtime session only on shutdown or a fatal error

    def opening(self) -> Sequence[Command]:
        """OpenAI's default session, announced with `session.created`."""
        self._updates.append((self._dialect, self._settings))
        return (self._settings.command(),)

    def is_fatal(self, error: ProtocolError) -> bool:
        return isinstance(error, FATAL_ERRORS)

    def close_code(self, error: ProtocolError) -> int:
        return error.close_code

    # ---- client events ------------------------------------------------------------

    def decode(self, message: Frame) -> Sequence[Command]:
        event_id: str | None = None
        try:
            event = read_event(message)
            raw_id = event.get("event_id")
            event_id = None if raw_id is None else text(raw_id, "event_id")
            return self._dispatch(event, event_id)
        except ProtocolError as exc:
            self._errors.append(_note(exc, event_id))
            raise

    def _dispatch(self, event: Mapping[str, Any], event_id: str | None) -> Sequence[Command]:
        kind = required(event, "type", "")
        if kind == "session.update":
            return self._update(event, Dialect.GA)
        if kind == "transcription_session.update":
            return self._update(event, Dialect.BETA)
        if kind == "input_audio_buffer.append":
            return self._append(event)
        if kind in ("input_audio_buffer.commit", "input_audio_buffer.clear"):
            check_keys(event, ("type", "event_id"), "")
            if kind == "input_audio_buffer.clear":
                return (Clear(),)
            self._commits.append(event_id)
            return (Commit(),)
        supported = ", ".join(CLIENT_EVENTS)
        raise UnknownMessageTypeError(
            f"Invalid value: {kind!r}. This transcription endpoint takes: {supported}."
        )

    def _update(self, event: Mapping[str, Any], dialect: Dialect) -> Sequence[Command]:
        check_keys(event, ("type", "event_id", "session"), "")
        parse = parse_ga if dialect is Dialect.GA else parse_beta
        new = parse(required(event, "session", ""), self._settings)
        self._check_pinned(new, dialect)
        new = pinned_settings(new, self._pinned)
        self._check_locked(new, dialect)
        command = new.command()
        self._check_writable(new, command, dialect)
        self._settings = new
        self._updates.append((dialect, new))
        return (command,)

    def _check_pinned(self, new: RealtimeSettings, dialect: Dialect) -> None:
        """The core refuses another format than the client secret's; saying so here names
        the field, and leaves this codec's settings as they were."""
        try:
            self._pinned.check(new.audio)
        except InvalidFieldError as exc:
            ga = dialect is Dialect.GA
            param = "session.audio.input.format" if ga else "session.input_audio_format"
            raise RealtimeFieldError(exc.message, param) from exc

    def _check_writable(self, new: RealtimeSettings, command: Configure, dialect: Dialect) -> None:
        """The core refuses hotwords the model cannot write; refusing them here names the
        field and leaves this codec's settings (and the updates it reports) as they were."""
        refused = self._hotword_refusal(command.options.hotwords)
        if refused is None:
            return
        ga = dialect is Dialect.GA
        param = "session.audio.input.transcription" if ga else "session.input_audio_transcription"
        in_keywords = self._hotword_refusal(hotwords_from(new.transcription.keywords))
        field = "prompt" if in_keywords is None else "keywords"
        raise RealtimeFieldError(refused, f"{param}.{field}", UnsupportedHotwordError.code)

    def _check_locked(self, new: RealtimeSettings, dialect: Dialect) -> None:
        """The core fixes these once audio flows; saying so here names the field."""
        if not self._audio_flowed:
            return
        ga = dialect is Dialect.GA
        if new.audio != self._settings.audio:
            param = "session.audio.input.format" if ga else "session.input_audio_format"
            raise LockedSettingError(
                "The audio format cannot change once audio has been appended.", param
            )
        if new.turns != self._settings.turns:
            param = "session.audio.input.turn_detection" if ga else "session.turn_detection"
            raise LockedSettingError(
                "Turn detection (on or off, prefix padding, silence duration) cannot change "
                "once audio has been appended.",
                param,
            )

    def _append(self, event: Mapping[str, Any]) -> Sequence[Command]:
        check_keys(event, ("type", "event_id", "audio"), "")
        audio = text(required(event, "audio", ""), "audio")
        if len(audio) > MAX_AUDIO_CHARS:
            raise FrameTooLargeError(
                f"audio of {len(audio)} base64 characters is over the {MAX_AUDIO_CHARS} limit"
            )
        try:
            data = base64.b64decode(audio, validate=True)
        except binascii.Error as exc:
            raise RealtimeFieldError(f"audio is not valid base64: {exc}", "audio") from exc
        if not data:
            return ()
        self._audio_flowed = True
        # One append may hold minutes of audio; the core takes it a second at a time, so
        # its bounded ring buffer never holds more than one step of unprocessed audio.
        step = min(self._settings.bytes_per_second, self._limits.max_frame_bytes)
        frame = self._settings.audio.bytes_per_frame
        step = max(frame, step - step % frame)
        return tuple(Audio(data[i : i + step]) for i in range(0, len(data), step))

    # ---- server events ------------------------------------------------------------

    def encode(self, event: SessionEvent) -> Sequence[Frame]:
        match event:
            case Configured():
                return (self._configured(event),)
            case SpeechStarted() if self._vad:
                item = self._item(event.utt_id)
                kind = "input_audio_buffer.speech_started"
                return (self._frame(kind, audio_start_ms=event.start_ms, item_id=item),)
            case SpeechStopped():
                return self._stopped(event)
            case Partial():
                return self._delta(event)
            case Committed():
                # Committed text is the final's beginning: it goes out as a delta at once.
                self._sent[event.utt_id] = self._sent.get(event.utt_id, "") + event.text
                entries = logprobs.entries(event.tokens, lead=None)  # they carry the space
                return (self._delta_frame(event.utt_id, event.text, entries),)
            case Final():
                return self._completed(event)
            case Failed():
                return (self._failed(event),)
            case Cleared():
                if event.utt_id is not None:
                    self._sent.pop(event.utt_id, None)
                return (self._frame("input_audio_buffer.cleared"),)
            case ErrorEvent():
                return (self._error(event),)
        return ()  # Ended (the server closes next) and speech starts without server VAD

    def _frame(self, kind: str, **fields: Any) -> str:
        return dump(
            {"type": kind, "event_id": f"event_{self._ids}_{next(self._event_ids)}", **fields}
        )

    def _item(self, utt_id: int) -> str:
        return f"item_{self._ids}_{utt_id}"

    def _configured(self, event: Configured) -> str:
        dialect, settings = (
            self._updates.popleft() if self._updates else (self._dialect, self._settings)
        )
        self._vad = event.options.turns.vad
        self._logprobs = settings.logprobs
        verb = "updated" if self._announced else "created"
        self._announced = True
        session_id = f"sess_{event.session_id}"
        if dialect is Dialect.GA:
            return self._frame(
                f"session.{verb}", session=render_ga(settings, session_id, event.model)
            )
        session = render_beta(settings, session_id, event.model)
        return self._frame(f"transcription_session.{verb}", session=session)

    def _stopped(self, event: SpeechStopped) -> Sequence[Frame]:
        item = self._item(event.utt_id)
        frames = []
        if self._vad:  # every speech_started gets its speech_stopped, whatever ended it
            kind = "input_audio_buffer.speech_stopped"
            frames.append(self._frame(kind, audio_end_ms=event.end_ms, item_id=item))
        if event.cause is StopCause.COMMIT and self._commits:
            self._commits.popleft()
        kind = "input_audio_buffer.committed"
        frames.append(self._frame(kind, item_id=item, previous_item_id=self._last_item))
        self._last_item = item
        return frames

    def _delta(self, event: Partial) -> Sequence[Frame]:
        """Deltas only append: the stable prefix's growth past what was already sent."""
        stable = event.text[: event.stable_chars]
        sent = self._sent.get(event.utt_id, "")
        if len(stable) <= len(sent) or not stable.startswith(sent):
            return ()
        self._sent[event.utt_id] = stable
        return (self._delta_frame(event.utt_id, stable[len(sent) :]),)

    def _delta_frame(
        self, utt_id: int, delta: str, entries: list[dict[str, Any]] | None = None
    ) -> str:
        """A delta, with its tokens' log-probabilities where the session includes them
        and they are known (a partial's are not: partials are never scored)."""
        item = self._item(utt_id)
        kind = f"{TRANSCRIPT}.delta"
        lp = entries if self._logprobs and entries else None
        return self._frame(kind, item_id=item, content_index=0, delta=delta, logprobs=lp)

    def _completed(self, event: Final) -> Sequence[Frame]:
        text_ = event.transcript.text
        sent = self._sent.pop(event.utt_id, "")
        frames = []
        # When the final extends what the deltas said, a last delta completes it, so the
        # deltas of an item add up to its transcript whenever no earlier text was revised.
        if len(text_) > len(sent) and text_.startswith(sent):
            rest = logprobs.after(event, len(sent))
            frames.append(self._delta_frame(event.utt_id, text_[len(sent) :], rest))
        seconds = round((event.end_ms - event.start_ms) / 1000, 3)
        frames.append(
            self._frame(
                f"{TRANSCRIPT}.completed",
                item_id=self._item(event.utt_id),
                content_index=0,
                transcript=text_,
                usage={"type": "duration", "seconds": seconds},
                logprobs=logprobs.entries(event.transcript.tokens) if self._logprobs else None,
                sensevoice=sensevoice_fields(event),
            )
        )
        return frames

    def _failed(self, event: Failed) -> str:
        self._sent.pop(event.utt_id, None)
        error = {"type": "transcription_error", "code": event.code, "message": event.message}
        return self._frame(
            f"{TRANSCRIPT}.failed",
            item_id=self._item(event.utt_id),
            content_index=0,
            error={**error, "param": None},
        )

    def _error(self, event: ErrorEvent) -> str:
        note = self._note_for(event)
        kind = "server_error" if event.code in SERVER_FAULTS else "invalid_request_error"
        error = {"type": kind, "code": note.openai_code, "message": event.message}
        return self._frame("error", error={**error, "param": note.param, "event_id": note.event_id})

    def _note_for(self, event: ErrorEvent) -> _ErrorNote:
        """What is known of the error's cause; errors are reported in the order they arose."""
        for i, note in enumerate(self._errors):
            if (note.code, note.message) == (event.code, event.message):
                for _ in range(i + 1):
                    self._errors.popleft()
                return note
        event_id = None
        if event.code == EmptyCommitError.code and self._commits:
            event_id = self._commits.popleft()
        openai_code = OPENAI_CODES.get(event.code, event.code)
        return _ErrorNote(event.code, event.message, openai_code, None, event_id)
