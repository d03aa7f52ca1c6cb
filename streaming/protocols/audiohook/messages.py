"""Genesys AudioHook (protocol v2) messages: the client envelope, `open`, durations, replies.

Every text message carries `version: "2"`, the session `id` (a UUID), its `type`, a
`seq` and `parameters`; the client's add `serverseq` (the last server seq it saw) and
`position` (where its audio stream is, an ISO 8601 duration such as `PT1.5S`), the
server's `clientseq` (the last client seq it saw). What is checked here is each message
on its own; the order rules (seq, state) are the codec's.

An `open` may continue earlier sessions of the call (`continuedSessions`: the client
reconnected, as a server's `reconnect` asks): each entry names one by its `id`, with the
`serverseq` and `clientseq` the client left it at. So Genesys' reference implementation
types them (`app/audiohook/src/protocol/message.ts`, `ContinuedSession`); it documents no
more, and by the envelope's fields they are the last server seq the client saw there and
the last client seq it sent there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from streaming.errors import FrameTooLargeError, InvalidFieldError
from streaming.protocols.caps import redact_policies
from streaming.protocols.json_text import load_object
from streaming.redaction.policies import Redaction

VERSION: Final = "2"
#: AudioHook's own cap on a text message (its reference client and server both enforce it).
MAX_TEXT_BYTES: Final = 65535
#: The one audio format served: G.711 μ-law at 8 kHz (Genesys offers only this for calls).
FORMAT: Final = "PCMU"
RATE: Final = 8000
CHANNEL_NAMES: Final = ("external", "internal")  # the customer's side, the agent's
#: A connection probe opens with this conversation id; it is no call.
NULL_UUID: Final = "00000000-0000-0000-0000-000000000000"
#: AudioHook's client messages. `dtmf`, `playback_started` and `playback_completed` are
#: the voice-bot additions of the same protocol (Genesys' Audio Connector reference server,
#: `src/protocol/voice-bots.ts`); a monitor server takes them and does nothing.
CLIENT_TYPES: Final = (
    "open",
    "ping",
    "paused",
    "resumed",
    "discarded",
    "update",
    "error",
    "dtmf",
    "playback_started",
    "playback_completed",
    "close",
)
#: Client messages that change nothing here (checked, then dropped), in any state.
NOTE_TYPES: Final = ("error", "dtmf", "playback_started", "playback_completed")
CLOSE_REASONS: Final = ("end", "error", "disconnect", "reconnect")
#: A BCP 47 tag's shape (`en-US`, `zh-Hant-TW`, `yue-HK`): ASCII subtags of 1 to 8 letters
#: and digits, the first letters only; at most 35 characters, RFC 5646's advice for a
#: buffer. The reference server is stricter (`ll-RR` only); this takes every such tag.
_LANGUAGE = re.compile(r"[A-Za-z]{1,8}(?:-[A-Za-z0-9]{1,8})*")
_MAX_LANGUAGE_CHARS = 35
_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
_DURATION = re.compile(r"PT(\d*\.?\d+)S")
#: Positions beyond this many seconds (over eleven days) are taken as a client bug.
_MAX_SECONDS = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class ClientMessage:
    """One client text message whose envelope is well formed."""

    type: str
    id: str
    seq: int
    serverseq: int
    position: int  # samples at 8 kHz
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Media:
    """One media format: an `open` offer, or the one `opened` chose."""

    channels: tuple[str, ...]
    format: str = FORMAT
    rate: int = RATE

    @property
    def supported(self) -> bool:
        return self.format == FORMAT and self.rate == RATE and self.channels != ()

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "audio",
            "format": self.format,
            "channels": list(self.channels),
            "rate": self.rate,
        }


@dataclass(frozen=True, slots=True)
class ContinuedSession:
    """An earlier session that an `open` continues, as the client left it."""

    id: str  # the earlier session's id (a UUID, in lower case)
    serverseq: int  # the last server seq the client saw on it
    clientseq: int  # the last client seq the client sent on it


@dataclass(frozen=True, slots=True)
class OpenRequest:
    """What an `open` asks for: the call, its media offers, its language."""

    organization_id: str
    conversation_id: str
    media: tuple[Media, ...]
    language: str | None
    wants_languages: bool  # `supportedLanguages: true`: list them in `opened`
    # The integration's `customConfig.redact` ("pci,ssn") and `redact_mask`: added to the
    # server's redaction.
    redact: Redaction = field(default_factory=Redaction)
    # `continuedSessions`, in the client's order: empty for a new session.
    continued: tuple[ContinuedSession, ...] = ()


def read_client_message(text: str) -> ClientMessage:
    """A client message's envelope, checked; its parameters are the type's to check."""
    # surrogatepass: a str may hold a raw lone surrogate (escaped ones are refused by the
    # JSON reader); it is measured here, and no field echoed back can hold one.
    size = len(text) if len(text) > MAX_TEXT_BYTES else len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_TEXT_BYTES:
        raise FrameTooLargeError(
            f"text message of {size} bytes is over AudioHook's {MAX_TEXT_BYTES} byte limit"
        )
    obj = load_object(text, "AudioHook message")
    version = obj.get("version")
    if version != VERSION:
        raise InvalidFieldError(
            f"version {version!r} is not supported: this server speaks AudioHook version 2"
        )
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise InvalidFieldError("type must be a string")
    parameters = obj.get("parameters")
    if not isinstance(parameters, dict):
        raise InvalidFieldError("parameters must be a JSON object")
    return ClientMessage(
        kind,
        uuid_field(obj, "id"),
        count_field(obj, "seq"),
        count_field(obj, "serverseq"),
        duration_field(obj, "position"),
        parameters,
    )


def uuid_field(obj: Mapping[str, Any], name: str, where: str = "") -> str:
    value = obj.get(name)
    if not isinstance(value, str) or not _UUID.fullmatch(value):
        raise InvalidFieldError(f"{where}{name} must be a UUID; got {value!r}")
    return value.lower()


def count_field(obj: Mapping[str, Any], name: str, where: str = "") -> int:
    value = obj.get(name)
    if type(value) is not int or value < 0:  # bool is an int: `true` is no seq
        raise InvalidFieldError(f"{where}{name} must be a non-negative integer; got {value!r}")
    return value


def duration_field(obj: Mapping[str, Any], name: str, where: str = "") -> int:
    """An ISO 8601 duration in seconds (`PT1.5S`) as samples at 8 kHz."""
    value = obj.get(name)
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    seconds = Decimal(match.group(1)) if match else None
    if seconds is None or seconds > _MAX_SECONDS:
        raise InvalidFieldError(
            f"{where}{name} must be a duration in seconds such as PT1.5S; got {value!r}"
        )
    return int((seconds * RATE).to_integral_value())


def language_field(value: object, where: str = "") -> str:
    """A language tag as the client sent it, checked to be BCP 47 in shape.

    The tag is echoed back in transcripts, so nothing but its ASCII shape gets through.
    """
    if isinstance(value, str) and len(value) <= _MAX_LANGUAGE_CHARS and _LANGUAGE.fullmatch(value):
        return value
    raise InvalidFieldError(f"{where}language must be a BCP 47 tag such as en-US; got {value!r}")


def format_duration(ms: int) -> str:
    """Milliseconds as an AudioHook duration: `PT1.5S`, `PT0.02S`, `PT3S`."""
    ms = max(ms, 0)
    whole, frac = divmod(ms, 1000)
    return f"PT{whole}.{frac:03d}".rstrip("0").rstrip(".") + "S"


def read_open(parameters: Mapping[str, Any]) -> OpenRequest:
    """The `open` parameters this server uses; others (participant, the rest of
    customConfig) pass."""
    where = "open: "
    participant = parameters.get("participant")
    if not isinstance(participant, dict):
        raise InvalidFieldError(f"{where}participant must be a JSON object")
    language = parameters.get("language")
    if language is not None:
        language = language_field(language, where)
    wants = parameters.get("supportedLanguages", False)
    if not isinstance(wants, bool):
        raise InvalidFieldError(f"{where}supportedLanguages must be true or false")
    return OpenRequest(
        uuid_field(parameters, "organizationId", where),
        uuid_field(parameters, "conversationId", where),
        read_media(parameters.get("media")),
        language,
        wants,
        _redaction(parameters.get("customConfig"), where),
        read_continued(parameters.get("continuedSessions", [])),
    )


def _redaction(config: object, where: str) -> Redaction:
    """`customConfig.redact` (a list or "pci,ssn") and `customConfig.redact_mask`."""
    if not isinstance(config, dict):
        return Redaction()
    policies = redact_policies(config.get("redact", []), f"{where}customConfig.redact")
    mask = config.get("redact_mask", False)
    if not isinstance(mask, bool):
        raise InvalidFieldError(f"{where}customConfig.redact_mask must be true or false")
    return Redaction(policies, mask)


def read_continued(value: object) -> tuple[ContinuedSession, ...]:
    """An `open`'s `continuedSessions`: each earlier session once."""
    where = "open: continuedSessions"
    if not isinstance(value, list):
        raise InvalidFieldError(f"{where} must be a list of sessions; got {value!r}")
    sessions: list[ContinuedSession] = []
    for index, item in enumerate(value):
        at = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise InvalidFieldError(f"{at} must be a JSON object; got {item!r}")
        session = ContinuedSession(
            uuid_field(item, "id", f"{at}."),
            count_field(item, "serverseq", f"{at}."),
            count_field(item, "clientseq", f"{at}."),
        )
        # Two entries for one session would leave it unsaid where the client left it.
        if any(s.id == session.id for s in sessions):
            raise InvalidFieldError(f"{at}.id names session {session.id} a second time")
        sessions.append(session)
    return tuple(sessions)


def read_media(value: object) -> tuple[Media, ...]:
    """The offers of an `open`, in the client's order of preference."""
    if not isinstance(value, list):
        raise InvalidFieldError(f"open: media must be a list of media formats; got {value!r}")
    return tuple(_media(item, i) for i, item in enumerate(value))


def _media(item: object, index: int) -> Media:
    where = f"open: media[{index}]"
    if not isinstance(item, dict) or item.get("type") != "audio":
        raise InvalidFieldError(f'{where} must be an object with type "audio"')
    channels = item.get("channels")
    names: Sequence[object] = channels if isinstance(channels, list) else ()
    known = all(isinstance(n, str) and n in CHANNEL_NAMES for n in names)
    if not known or not 1 <= len(names) <= 2 or len(set(names)) != len(names):
        raise InvalidFieldError(
            f'{where}.channels must list "external" and/or "internal" once each; got {channels!r}'
        )
    fmt, rate = item.get("format"), item.get("rate")
    if not isinstance(fmt, str) or type(rate) is not int:
        raise InvalidFieldError(f"{where} needs a format string and an integer rate")
    return Media(tuple(str(n) for n in names), fmt, rate)


def choose_media(offers: Sequence[Media]) -> Media | None:
    """Stereo PCMU at 8 kHz if offered (each party recognised apart), else mono."""
    usable = [m for m in offers if m.supported]
    stereo = [m for m in usable if len(m.channels) == 2]
    chosen = stereo or usable
    return chosen[0] if chosen else None


def server_message(
    kind: str, session_id: str, seq: int, clientseq: int, parameters: Mapping[str, Any]
) -> str:
    """One server message, as compact JSON."""
    obj = {
        "version": VERSION,
        "type": kind,
        "seq": seq,
        "clientseq": clientseq,
        "id": session_id,
        "parameters": parameters,
    }
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
