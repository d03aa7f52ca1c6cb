"""Reading Twilio Media Streams messages: `start`'s call and options, `media`'s chunk.

Twilio's fields are JSON strings even where they hold numbers (`timestamp`, `chunk`,
`sequenceNumber`); numbers are taken as numbers too, so other platforms that speak this
protocol (and hand-written test clients) are understood. `sequenceNumber` and `chunk` are
not checked: audio is placed by `timestamp` alone, which says more (see twilio_jitter).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streaming.commands import STREAM_ID, StreamOptions
from streaming.errors import InvalidAudioError, InvalidFieldError
from streaming.protocols.caps import redact_policies
from streaming.redaction.policies import Redaction

#: Twilio's two tracks, in channel order: the caller (inbound) first.
TRACKS = ("inbound", "outbound")
ENCODING = "audio/x-mulaw"
RATE = 8000
#: The customParameters entry that carries a SenseStream API key.
KEY_PARAMETER = "api_key"
#: The customParameters entry that names the stream's webhook (the server allows it or not).
WEBHOOK_PARAMETER = "webhook_url"
#: customParameters that set stream options: TwiML `<Parameter>` values are strings.
FLAG_PARAMETERS = ("itn", "partials", "emotion", "event", "timestamps")
TEXT_PARAMETERS = ("language", "pace")
FLAG_VALUES: Mapping[str, bool] = {"true": True, "1": True, "false": False, "0": False}
_DIGITS = re.compile(r"[0-9]{1,12}")


@dataclass(frozen=True, slots=True)
class StartInfo:
    """What `start` says about the stream: whose call, which tracks, which options."""

    call_sid: str
    stream_sid: str | None
    account_sid: str | None
    tracks: tuple[str, ...]  # in channel order
    options: StreamOptions
    webhook_url: str | None = None  # customParameters.webhook_url: where finals are POSTed


@dataclass(frozen=True, slots=True)
class MediaChunk:
    """One `media` message: a track's μ-law bytes and where they start (ms), if said."""

    track: str | None
    timestamp_ms: int | None
    payload: bytes


def section(obj: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The object under `name` (`start`, `media`, …), which Twilio always sends."""
    body = obj.get(name)
    if not isinstance(body, dict):
        raise InvalidFieldError(f"a {name} message needs a `{name}` object")
    return body


def custom_parameters(body: Mapping[str, Any]) -> dict[str, str]:
    """`start.customParameters` (absent: none); every value must be a string."""
    params = body.get("customParameters", {})
    if not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values()):
        raise InvalidFieldError("start.customParameters must be an object of strings")
    return params


def api_key(body: Mapping[str, Any]) -> str | None:
    """The API key in customParameters, read before anything else of `start` is judged."""
    params = body.get("customParameters")
    key = params.get(KEY_PARAMETER) if isinstance(params, dict) else None
    return key if isinstance(key, str) else None


def parse_start(body: Mapping[str, Any]) -> StartInfo:
    """`start`'s object: the call, its tracks and μ-law format, options from parameters."""
    check_media_format(body.get("mediaFormat"))
    call_sid = body.get("callSid")
    if not isinstance(call_sid, str) or not STREAM_ID.fullmatch(call_sid):
        raise InvalidFieldError("start.callSid must be a call SID (letters and digits)")
    params = custom_parameters(body)
    return StartInfo(
        call_sid,
        _optional_text(body, "streamSid"),
        _optional_text(body, "accountSid"),
        parse_tracks(body.get("tracks")),
        stream_options(params),
        params.get(WEBHOOK_PARAMETER),
    )


def check_media_format(fmt: Any) -> None:
    """Twilio streams 8 kHz mono μ-law only; absent, that is what is assumed."""
    if fmt is None:
        return
    if not isinstance(fmt, dict):
        raise InvalidFieldError("start.mediaFormat must be an object")
    encoding = fmt.get("encoding", ENCODING)
    if not isinstance(encoding, str) or encoding.lower() != ENCODING:
        raise InvalidFieldError(f"start.mediaFormat.encoding must be {ENCODING}; got {encoding!r}")
    if number(fmt.get("sampleRate", RATE), "start.mediaFormat.sampleRate") != RATE:
        raise InvalidFieldError(f"start.mediaFormat.sampleRate must be {RATE}")
    if number(fmt.get("channels", 1), "start.mediaFormat.channels") != 1:
        raise InvalidFieldError("start.mediaFormat.channels must be 1 (one per track)")


def parse_tracks(tracks: Any) -> tuple[str, ...]:
    """The streamed tracks in channel order (absent: Twilio's default, inbound only)."""
    if tracks is None:
        return TRACKS[:1]
    if not isinstance(tracks, list) or not tracks:
        raise InvalidFieldError("start.tracks must be a non-empty list of track names")
    names = {track_name(t, "start.tracks") for t in tracks}
    return tuple(t for t in TRACKS if t in names)


def track_name(value: Any, where: str) -> str:
    """`inbound` or `outbound` (TwiML's `inbound_track` spelling too)."""
    name = value.removesuffix("_track") if isinstance(value, str) else None
    if name not in TRACKS:
        raise InvalidFieldError(f"{where} must name inbound or outbound; got {value!r}")
    return name


def stream_options(params: Mapping[str, str]) -> StreamOptions:
    """Options a TwiML `<Parameter>` may set: language, pace, the on/off flags, and
    `redact` ("pci,ssn", added to the server's) with `redact_mask`."""
    fields: dict[str, Any] = {name: params[name] for name in TEXT_PARAMETERS if name in params}
    for name in (*FLAG_PARAMETERS, "redact_mask"):
        if name in params:
            flag = FLAG_VALUES.get(params[name].lower())
            if flag is None:
                raise InvalidFieldError(f"customParameters.{name} must be true or false")
            fields[name] = flag
    mask = fields.pop("redact_mask", False)
    fields["redact"] = Redaction(
        redact_policies(params.get("redact", ""), "customParameters.redact"), mask
    )
    return StreamOptions(**fields)


def parse_media(body: Mapping[str, Any]) -> MediaChunk:
    """`media`'s object: track, timestamp (ms since the stream started) and payload."""
    track = body.get("track")
    timestamp = body.get("timestamp")
    payload = body.get("payload")
    if not isinstance(payload, str):
        raise InvalidFieldError("media.payload must be a base64 string")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidAudioError(f"media.payload is not valid base64: {exc}") from exc
    return MediaChunk(
        None if track is None else track_name(track, "media.track"),
        None if timestamp is None else number(timestamp, "media.timestamp"),
        data,
    )


def number(value: Any, where: str) -> int:
    """A non-negative whole number, as Twilio writes it (a string of digits) or as JSON."""
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**12:
        return value
    raise InvalidFieldError(f"{where} must be a whole number of at most 12 digits; got {value!r}")


def _optional_text(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    return value if isinstance(value, str) else None
