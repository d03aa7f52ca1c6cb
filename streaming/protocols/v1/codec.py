"""Protocol v1, SenseStream's own: JSON text control messages and binary audio frames.

Its frame limits (a 4 KiB text frame by default) and close codes are this codec's, not
the session core's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from engine.types import MAX_HOTWORDS, Hotword
from streaming.audio.decoder import AudioFormat
from streaming.commands import (
    CLIENT_LANGUAGES,
    Audio,
    Command,
    Configure,
    Cut,
    Stop,
    StreamOptions,
    TurnDetection,
    hotwords_from,
)
from streaming.errors import (
    InvalidFieldError,
    ProtocolError,
    ResumeRefusedError,
    StateError,
    UnknownMessageTypeError,
)
from streaming.events import (
    Acked,
    Cleared,
    Committed,
    Configured,
    Ended,
    ErrorEvent,
    Failed,
    Final,
    Marked,
    Partial,
    Resumed,
    SessionEvent,
    SpeechStarted,
    SpeechStopped,
)
from streaming.limits import SessionLimits
from streaming.pieces.policy import COMMIT_MODES
from streaming.protocols.base import Frame
from streaming.protocols.caps import check_count, redact_policies
from streaming.protocols.json_text import load_object, tag_fields
from streaming.redaction.policies import Policy, Redaction
from streaming.speakers.labels import turn_at

PROTOCOL_VERSION = 1


@dataclass(frozen=True, slots=True)
class StartMessage:
    """The optional first message: audio format, decoding prompts and per-session toggles."""

    sample_rate: int = 16000
    encoding: str = "pcm_s16le"
    channels: int = 1
    language: str = "auto"
    itn: bool = True
    partials: bool = True
    emotion: bool = True
    event: bool = True
    timestamps: bool = True
    pace: str = "live"
    multichannel: bool = False  # recognise each channel on its own (a call's two parties)
    channel_labels: tuple[str, ...] = ()  # names for the channels (default "0", "1")
    stream_id: str | None = None  # what subscribers follow the stream by
    webhook_url: str | None = None  # where the server POSTs the finals (if it allows it)
    hotwords: tuple[Hotword, ...] = ()  # phrases decoding favours
    redact: frozenset[Policy] = frozenset()  # added to the server's --redact
    redact_mask: bool = False
    commit: str | None = None  # "pauses" or "off"; None: the server's --commit
    end_silence_ms: int | None = None  # the pause that ends an utterance; None: the server's
    diarize: bool | None = None  # label who spoke; None: the server's --diarize
    max_speakers: int | None = None  # at most this many speakers told apart
    min_speakers: int | None = None  # at least this many (where clustered at the end)
    confidence: bool | None = None  # tokens, words and finals scored; None: --confidence
    resume: ResumeRequest | None = None  # take up a dropped stream (see `ResumeRequest`)

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in START_FIELDS if name != "resume"}
        out["channel_labels"] = list(self.channel_labels)
        out["hotwords"] = hotwords_json(self.hotwords)
        out["redact"] = sorted(p.value for p in self.redact)
        return out

    def to_command(self) -> Configure:
        options = StreamOptions(
            self.language,
            self.itn,
            self.partials,
            self.emotion,
            self.event,
            self.timestamps,
            self.pace,
            TurnDetection(end_silence_ms=self.end_silence_ms),
            hotwords=self.hotwords,
            redact=Redaction(self.redact, self.redact_mask),
            commit=self.commit,
            diarize=self.diarize,
            max_speakers=self.max_speakers,
            min_speakers=self.min_speakers,
            confidence=self.confidence,
        )
        audio = AudioFormat(self.encoding, self.sample_rate, self.channels)
        return Configure(audio, options, self.labels(), self.stream_id, self.webhook_url)

    def labels(self) -> tuple[str, ...]:
        """The channel labels of a multichannel stream; () when its channels are mixed."""
        if not self.multichannel:
            if self.channel_labels:
                raise InvalidFieldError("start.channel_labels needs multichannel: true")
            return ()
        if self.channels < 2:
            raise InvalidFieldError("start.multichannel needs channels: 2 or more")
        return self.channel_labels or tuple(str(c) for c in range(self.channels))


@dataclass(frozen=True, slots=True)
class StopMessage:
    """End of the audio stream: owed finals, then `end`, then close."""


@dataclass(frozen=True, slots=True)
class FinalizeMessage:
    """End the utterance in progress now (Deepgram's `Finalize`); the stream goes on."""


ClientMessage = StartMessage | StopMessage | FinalizeMessage

START_FIELDS: Mapping[str, type] = {
    "sample_rate": int,
    "encoding": str,
    "channels": int,
    "language": str,
    "itn": bool,
    "partials": bool,
    "emotion": bool,
    "event": bool,
    "timestamps": bool,
    "pace": str,
    "multichannel": bool,
    "channel_labels": list,
    "stream_id": str,
    "webhook_url": str,
    "hotwords": object,  # a list of phrases, or {phrase: boost}: read by `_hotwords`
    "redact": object,  # a list of policies, or "pci,ssn": read by `parse_policies`
    "redact_mask": bool,
    "commit": str,
    "end_silence_ms": int,
    "diarize": bool,
    "max_speakers": int,
    "min_speakers": int,
    "confidence": bool,
    "resume": dict,  # read by `_resume`
}
CHOICES: Mapping[str, tuple[Any, ...]] = {
    "language": CLIENT_LANGUAGES,
    "commit": COMMIT_MODES,
    # A live client is held to real time (with a burst); a replay may go much faster.
    "pace": ("live", "replay"),
}


def parse_client_text(text: str) -> ClientMessage:
    """Parse one text frame; raises a typed ProtocolError for anything not in protocol v1."""
    obj = load_object(text)
    kind = obj.pop("type", None)
    version = obj.pop("v", PROTOCOL_VERSION)
    if version != PROTOCOL_VERSION or isinstance(version, bool):
        raise InvalidFieldError(f"unsupported protocol version {version!r}; this server speaks 1")
    if kind == "start":
        return _parse_start(obj)
    if kind == "stop":
        _reject_unknown(obj, (), "stop")
        return StopMessage()
    if kind == "finalize":
        _reject_unknown(obj, (), "finalize")
        return FinalizeMessage()
    if not isinstance(kind, str):
        raise UnknownMessageTypeError("message has no string `type` field")
    raise UnknownMessageTypeError(
        f"unknown message type {kind!r}; expected start, finalize or stop"
    )


def _parse_start(obj: dict[str, Any]) -> StartMessage:
    _reject_unknown(obj, tuple(START_FIELDS), "start")
    if "resume" in obj:
        return StartMessage(resume=_resume(obj.pop("resume"), obj))
    hotwords = _hotwords(obj.pop("hotwords", []))
    redact = redact_policies(obj.pop("redact", []), "start.redact")
    for name, value in obj.items():
        expected = START_FIELDS[name]
        # bool is a subclass of int in Python; JSON true must not pass as 1.
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise InvalidFieldError(
                f"start.{name} must be {expected.__name__}; got {type(value).__name__}"
            )
        allowed = CHOICES.get(name)
        if allowed is not None and value not in allowed:
            raise InvalidFieldError(
                f"start.{name} must be one of {', '.join(map(str, allowed))}; got {value!r}"
            )
    labels = obj.pop("channel_labels", [])
    if not all(isinstance(label, str) for label in labels):
        raise InvalidFieldError("start.channel_labels must be a list of strings")
    start = StartMessage(**obj, channel_labels=tuple(labels), hotwords=hotwords, redact=redact)
    # Audio fields, labels and stream id are checked by the command's own types, in one place.
    start.to_command()
    return start


@dataclass(frozen=True, slots=True)
class ResumeRequest:
    """`start.resume`: the token `ready` gave, the sample (frames at the stream's rate,
    from its start) the client's audio resumes from, and the last final it received (its
    `utt_id`; None: none), so that it gets every later final once; a multichannel
    stream's client names each channel's instead (`last_utt_ids`)."""

    token: str
    samples: int
    last_utt_id: int | None = None
    last_utt_ids: tuple[int | None, ...] | None = None


def _resume(value: object, rest: Mapping[str, Any]) -> ResumeRequest:
    """start.resume, which takes the stream up as it was configured: nothing else may be
    in that start."""
    if rest:
        raise InvalidFieldError("a start that resumes takes no other fields")
    if not isinstance(value, dict):
        raise InvalidFieldError("start.resume must be an object")
    _reject_unknown(value, ("token", "samples", "last_utt_id", "last_utt_ids"), "start.resume")
    token, samples, last = value.get("token"), value.get("samples"), value.get("last_utt_id")
    if not isinstance(token, str) or not token:
        raise InvalidFieldError("start.resume.token must be the token `ready` gave")
    if not _whole(samples) or samples < 0:
        raise InvalidFieldError("start.resume.samples must be a whole number >= 0")
    if last is not None and not _utt_id(last):
        raise InvalidFieldError("start.resume.last_utt_id must be a whole number >= 0 or null")
    return ResumeRequest(token, samples, last, _last_per_channel(value.get("last_utt_ids")))


def _last_per_channel(value: object) -> tuple[int | None, ...] | None:
    """start.resume.last_utt_ids: one entry a channel (a whole number >= 0, or null)."""
    if value is None:
        return None
    if not isinstance(value, list) or not 1 <= len(value) <= 8:
        raise InvalidFieldError("start.resume.last_utt_ids must be a list, one entry a channel")
    if not all(v is None or _utt_id(v) for v in value):
        raise InvalidFieldError("start.resume.last_utt_ids holds whole numbers >= 0 or null")
    return tuple(value)


def _utt_id(value: object) -> bool:
    return _whole(value) and value >= 0


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _hotwords(value: object) -> tuple[Hotword, ...]:
    """start.hotwords: a list of phrases (each at the default boost) or {phrase: boost}."""
    if isinstance(value, list | dict):
        check_count(len(value), MAX_HOTWORDS, "hotwords")  # before a phrase is read
    if isinstance(value, list) and all(isinstance(p, str) for p in value):
        return hotwords_from(value)
    if isinstance(value, dict) and all(
        isinstance(b, int | float) and not isinstance(b, bool) for b in value.values()
    ):
        return hotwords_from(value)
    raise InvalidFieldError("start.hotwords must be a list of phrases or {phrase: boost}")


def hotwords_json(hotwords: Sequence[Hotword]) -> dict[str, float]:
    """Hotwords as `ready.config` echoes them: {phrase: boost}."""
    return {h.phrase: h.boost for h in hotwords}


def _reject_unknown(obj: Mapping[str, Any], known: tuple[str, ...], kind: str) -> None:
    unknown = sorted(set(obj) - set(known))
    if unknown:
        raise InvalidFieldError(f"unknown field(s) in {kind}: {', '.join(unknown)}")


def ready_config(event: Configured) -> dict[str, Any]:
    """The effective start fields, as `ready.config` reports them."""
    audio, options = event.audio, event.options
    values = {
        "sample_rate": audio.sample_rate,
        "encoding": audio.encoding,
        "channels": audio.channels,
        "multichannel": event.multichannel,
        "channel_labels": list(event.channel_labels),
        "stream_id": event.stream_id or event.session_id,
        "webhook_url": event.webhook_url,
        "hotwords": hotwords_json(options.hotwords),
        "redact": sorted(p.value for p in options.redact.policies),
        "redact_mask": options.redact.mask,
        "end_silence_ms": options.turns.end_silence_ms,
    }
    return {
        name: values.get(name, getattr(options, name, None))
        for name in START_FIELDS
        if name != "resume"  # how a connection takes a stream up, not a setting of it
    }


def event_to_dict(event: SessionEvent, labels: Sequence[str] = ()) -> dict[str, Any] | None:
    """The JSON object for one event (None for events v1 does not carry); all carry `"v": 1`.

    In a multichannel stream an utterance's events carry its `channel` and, from `labels`
    (the stream's `Configured.channel_labels`), its `label`.
    """
    head: dict[str, Any] = {"v": PROTOCOL_VERSION}
    match event:
        case Configured():
            head.update(type="ready", session_id=event.session_id, config=ready_config(event))
            head.update(model=event.model, test_model=event.test_model)
            head.update(demo_model=event.demo_model)
        case SpeechStarted():
            head.update(type="speech_started", utt_id=event.utt_id, start_ms=event.start_ms)
        case Partial():
            head.update(type="partial", utt_id=event.utt_id, start_ms=event.start_ms)
            head.update(end_ms=event.end_ms, text=event.text, stable_chars=event.stable_chars)
            head.update(event.tags)
        case Committed():
            head.update(type="committed", utt_id=event.utt_id, start_ms=event.start_ms)
            head.update(end_ms=event.end_ms, text=event.text)
        case Final():
            head.update(_final_fields(event))
        case ErrorEvent() | Failed():
            head.update(type="error", code=event.code, message=event.message)
        case Ended():
            head.update(type="end")
        case Acked():
            head.update(type="ack", samples=event.samples)
        case Resumed():
            head.update(type="resumed", samples=event.samples)
            head.update(resume_token=event.resume_token, stopped=event.stopped)
        case SpeechStopped() | Cleared() | Marked():
            return None
    channel = getattr(event, "channel", None)
    if channel is not None:
        head.update(channel=channel, label=labels[channel] if channel < len(labels) else None)
    return head


def _final_fields(event: Final) -> dict[str, Any]:
    t = event.transcript
    out: dict[str, Any] = {
        "type": "final",
        "utt_id": event.utt_id,
        "start_ms": event.start_ms,
        "end_ms": event.end_ms,
        "decided_ms": event.decided_ms,
        "text": t.text,
        "lang": t.lang,
        "itn": t.itn,
        "rich_text": t.rich_text,
    }
    if event.redactions:  # what was taken out, and when (for a recorder to bleep)
        out["redactions"] = [span.to_dict() for span in event.redactions]
    return _speaker_fields(event, out | tag_fields(event))


def _speaker_fields(event: Final, out: dict[str, Any]) -> dict[str, Any]:
    """Who spoke (with diarization): the final's speaker; where it changes within the
    utterance, each turn and each token's and word's speaker too."""
    if event.speaker is None:
        return out
    out["speaker"] = event.speaker
    turns = event.speaker_turns
    if len(turns) > 1:
        out["speakers"] = [
            {"speaker": t.speaker, "start_ms": t.start_ms, "end_ms": t.end_ms} for t in turns
        ]
        for unit in (*out.get("tokens", []), *out.get("words", [])):
            unit["speaker"] = turn_at(turns, (unit["start_ms"] + unit["end_ms"]) // 2)
    return out


def dump(obj: Mapping[str, Any]) -> str:
    """One compact JSON text frame."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class V1Codec:
    """Protocol v1 for one connection: an optional `start`, binary audio, `stop`.

    With resuming on, the server sets `resume_token_for` (stream id → token): `ready`
    then carries the stream's token. The codec counts the audio bytes it has taken, which
    the server acknowledges as samples. A stream handed over from another worker is
    `adopt`ed: its start is the one its client sent there, its count goes on from there,
    and no second `ready` is sent.
    """

    def __init__(self, limits: SessionLimits) -> None:
        self._limits = limits
        self._started = False  # a start or audio has arrived: start may not come again
        self._labels: tuple[str, ...] = ()  # the stream's channel labels, once configured
        self.resume_token_for: Callable[[str], str] | None = None
        self.audio_bytes = 0  # every binary frame taken, as sent
        self.bytes_per_frame = AudioFormat().bytes_per_frame  # the default start's, till one
        self.start_text: str | None = None  # the client's `start`, as sent
        self._base_samples = 0  # an adopted stream's audio, taken on another worker
        self._quiet_ready = False  # adopted: the client had its `ready` there

    @property
    def max_message_bytes(self) -> int:
        # A hard cap for the library; the limits below answer with an error event first.
        return 4 * max(self._limits.max_frame_bytes, self._limits.max_text_bytes)

    @property
    def end_grace_s(self) -> float:
        return 0.0  # v1 clients wait for the server to close

    def opening(self) -> Sequence[Command]:
        return ()

    def decode(self, message: Frame) -> Sequence[Command]:
        if isinstance(message, bytes):
            self._limits.check_frame(len(message), binary=True)
            self._started = True
            self.audio_bytes += len(message)
            return (Audio(message),)
        limit = self._limits.max_text_bytes
        size = len(message) if len(message) > limit else len(message.encode())
        self._limits.check_frame(size, binary=False)
        parsed = parse_client_text(message)
        if isinstance(parsed, StopMessage):
            return (Stop(),)
        if isinstance(parsed, FinalizeMessage):
            self._started = True  # a start after it would come too late
            return (Cut(),)
        if self._started:
            raise StateError("start may only be sent once, before any audio")
        if parsed.resume is not None:
            # The server takes a resume before a codec sees it, when it resumes at all.
            raise ResumeRefusedError(
                "no stream was resumed: this server does not resume streams "
                "(--resume-grace-s 0), or the resume was not sent at once after connecting"
            )
        self._started = True
        self.start_text = message
        return (parsed.to_command(),)

    def adopt(self, start_text: str | None, samples: int) -> Sequence[Command]:
        """Go on with a stream another worker served: the commands of its `start` (the
        default one if it had none), its audio counted on from `samples`."""
        commands = self.decode(start_text or '{"type":"start"}')
        for command in commands:
            if isinstance(command, Configure):  # counted in its format from the first
                self.bytes_per_frame = command.audio.bytes_per_frame
        self._base_samples = samples
        self._quiet_ready = True
        return commands

    @property
    def samples_taken(self) -> int:
        """The audio taken so far, in frames at the stream's rate (all its channels)."""
        return self._base_samples + self.audio_bytes // self.bytes_per_frame

    def encode(self, event: SessionEvent) -> Sequence[Frame]:
        if isinstance(event, Configured):
            self._labels = event.channel_labels
            self.bytes_per_frame = event.audio.bytes_per_frame
            if self._quiet_ready:
                self._quiet_ready = False
                return ()
        obj = event_to_dict(event, self._labels)
        if isinstance(event, Configured) and obj is not None and self.resume_token_for:
            obj["resume_token"] = self.resume_token_for(event.stream_id)
        return () if obj is None else (dump(obj),)

    def is_fatal(self, error: ProtocolError) -> bool:
        return True

    def close_code(self, error: ProtocolError) -> int:
        return error.close_code


def dump_event(event: SessionEvent) -> str:
    """Serialise an event v1 carries as one compact JSON text frame."""
    obj = event_to_dict(event)
    if obj is None:
        raise ValueError(f"protocol v1 has no message for {type(event).__name__}")
    return dump(obj)
