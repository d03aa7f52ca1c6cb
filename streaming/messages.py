"""Protocol v1 wire messages: parse and validate client text, dump server events as JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.types import LANGUAGES, Transcript
from streaming.audio import AudioFormat
from streaming.errors import InvalidFieldError, MalformedMessageError, UnknownMessageTypeError

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

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in START_FIELDS}


@dataclass(frozen=True, slots=True)
class StopMessage:
    """End of the audio stream: owed finals, then `end`, then close."""


ClientMessage = StartMessage | StopMessage

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
}
CHOICES: Mapping[str, tuple[Any, ...]] = {
    # nospeech is a model prompt, not a language a client may ask for.
    "language": LANGUAGES[:-1],
    # A live client is held to real time (with a burst); a replay may go much faster.
    "pace": ("live", "replay"),
}


def parse_client_text(text: str) -> ClientMessage:
    """Parse one text frame; raises a typed ProtocolError for anything not in protocol v1."""
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise MalformedMessageError(f"text message is not valid JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise MalformedMessageError("text message must be a JSON object")
    kind = obj.pop("type", None)
    version = obj.pop("v", PROTOCOL_VERSION)
    if version != PROTOCOL_VERSION or isinstance(version, bool):
        raise InvalidFieldError(f"unsupported protocol version {version!r}; this server speaks 1")
    if kind == "start":
        return _parse_start(obj)
    if kind == "stop":
        _reject_unknown(obj, (), "stop")
        return StopMessage()
    if not isinstance(kind, str):
        raise UnknownMessageTypeError("message has no string `type` field")
    raise UnknownMessageTypeError(f"unknown message type {kind!r}; expected start or stop")


def _parse_start(obj: dict[str, Any]) -> StartMessage:
    _reject_unknown(obj, tuple(START_FIELDS), "start")
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
    start = StartMessage(**obj)
    # The audio fields are checked by the decoder's own format type, in one place.
    AudioFormat(start.encoding, start.sample_rate, start.channels)
    return start


def _reject_unknown(obj: Mapping[str, Any], known: tuple[str, ...], kind: str) -> None:
    unknown = sorted(set(obj) - set(known))
    if unknown:
        raise InvalidFieldError(f"unknown field(s) in {kind}: {', '.join(unknown)}")


@dataclass(frozen=True, slots=True)
class Ready:
    session_id: str
    config: Mapping[str, Any]
    model: str
    test_model: bool


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    utt_id: int
    start_ms: int


@dataclass(frozen=True, slots=True)
class Partial:
    utt_id: int
    start_ms: int
    end_ms: int
    text: str
    stable_chars: int
    tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Final:
    utt_id: int
    start_ms: int
    end_ms: int
    transcript: Transcript
    show: Mapping[str, bool] = field(default_factory=dict)
    # Stream position when the VAD closed the utterance: decided_ms - end_ms is the VAD's
    # end-silence, and what follows it is engine and transport latency.
    decided_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class End:
    """Every owed final has been sent; the server closes next."""


ServerEvent = Ready | SpeechStarted | Partial | Final | ErrorEvent | End


def event_to_dict(event: ServerEvent) -> dict[str, Any]:
    """The JSON object for one server event; every event carries `"v": 1`."""
    head: dict[str, Any] = {"v": PROTOCOL_VERSION}
    match event:
        case Ready():
            head.update(type="ready", session_id=event.session_id, config=dict(event.config))
            head.update(model=event.model, test_model=event.test_model)
        case SpeechStarted():
            head.update(type="speech_started", utt_id=event.utt_id, start_ms=event.start_ms)
        case Partial():
            head.update(type="partial", utt_id=event.utt_id, start_ms=event.start_ms)
            head.update(end_ms=event.end_ms, text=event.text, stable_chars=event.stable_chars)
            head.update(event.tags)
        case Final():
            head.update(_final_fields(event))
        case ErrorEvent():
            head.update(type="error", code=event.code, message=event.message)
        case End():
            head.update(type="end")
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
    if event.show.get("emotion", True):
        out["emotion"] = t.emotion
    if event.show.get("event", True):
        out["event"] = t.event
    if event.show.get("timestamps", True):
        # Token times move from the utterance's clock to the stream's.
        out["tokens"] = [
            {
                "text": tok.text,
                "start_ms": event.start_ms + tok.start_ms,
                "end_ms": event.start_ms + tok.end_ms,
            }
            for tok in t.tokens
        ]
    return out


def dump_event(event: ServerEvent) -> str:
    """Serialise an event as one compact JSON text frame."""
    return json.dumps(event_to_dict(event), ensure_ascii=False, separators=(",", ":"))
