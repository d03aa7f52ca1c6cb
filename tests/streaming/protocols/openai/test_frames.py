"""Realtime client events read within their size caps: a control event is at most
MAX_EVENT_BYTES; only an append's base64 audio may make a frame larger, and such a frame
is read without parsing its bulk. What is over is refused as `frame_too_large`, 1009."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from streaming.commands import Audio, Configure
from streaming.errors import FrameTooLargeError, ProtocolError
from streaming.events import ErrorEvent
from streaming.limits import SessionLimits
from streaming.protocols.base import Frame, Handshake
from streaming.protocols.openai.fields import RealtimeFieldError
from streaming.protocols.openai.frames import MAX_APPEND_REST, MAX_EVENT_BYTES, read_event
from streaming.protocols.openai.realtime import OpenAIRealtimeCodec

APPEND = "input_audio_buffer.append"
#: Every byte value, so the base64 holds `+` and `/`; 768 KiB of base64, well over the cap.
AUDIO = bytes(range(256)) * 2304
B64 = base64.b64encode(AUDIO).decode()


def codec() -> OpenAIRealtimeCodec:
    return OpenAIRealtimeCodec(Handshake(), SessionLimits(), ids="t")


def refused(message: Frame) -> tuple[ProtocolError, dict[str, Any]]:
    """What the codec raises for `message`, and the `error` event's body that reports it."""
    c = codec()
    with pytest.raises(ProtocolError) as info:
        c.decode(message)
    exc = info.value
    (frame,) = c.encode(ErrorEvent(exc.code, exc.message))
    assert c.is_fatal(exc) is isinstance(exc, FrameTooLargeError)
    return exc, json.loads(frame)["error"]


def audio_of(commands: Any) -> bytes:
    assert all(isinstance(c, Audio) for c in commands)
    return b"".join(c.data for c in commands)


def update(keywords: list[Any], pad: int = 0) -> str:
    """A GA session.update naming `keywords`, with `pad` spaces of JSON whitespace."""
    session = {"type": "transcription", "audio": {"input": {"transcription": {}}}}
    session["audio"]["input"]["transcription"]["keywords"] = keywords
    event = {"type": "session.update", "session": session}
    return json.dumps(event, ensure_ascii=False) + " " * pad


def test_a_control_event_is_read_up_to_the_cap_counted_in_bytes() -> None:
    small = update(["Acme"])
    at_cap = update(["Acme"], MAX_EVENT_BYTES - len(small))
    assert len(at_cap.encode()) == MAX_EVENT_BYTES
    (command,) = codec().decode(at_cap)
    assert isinstance(command, Configure) and command.options.hotwords[0].phrase == "Acme"
    # One multi-byte character more is over, although it is one character.
    over = update(["Acm\u00e9"], MAX_EVENT_BYTES - len(small))
    assert len(over) == MAX_EVENT_BYTES and len(over.encode()) == MAX_EVENT_BYTES + 1
    exc, error = refused(over)
    assert isinstance(exc, FrameTooLargeError)
    assert (error["code"], error["param"]) == ("frame_too_large", None)


def test_a_huge_keyword_list_is_fatal_with_1009_not_a_refusal_to_repeat() -> None:
    # Two megabytes: thirty times the largest keyword list a session may hold (about 70 KiB).
    message = update([f"w{i}" for i in range(200_000)])
    exc, error = refused(message)
    assert isinstance(exc, FrameTooLargeError) and exc.close_code == 1009
    assert error["code"] == "frame_too_large" and str(MAX_EVENT_BYTES) in error["message"]
    # Over the cap, not even JSON is looked at: the size is the error.
    exc, _ = refused("{" * (MAX_EVENT_BYTES + 1))
    assert isinstance(exc, FrameTooLargeError)
    exc, _ = refused(b" " * (MAX_EVENT_BYTES + 1))
    assert isinstance(exc, FrameTooLargeError)
    exc, _ = refused(b"\xff" * (MAX_EVENT_BYTES + 1))  # not UTF-8 either
    assert isinstance(exc, FrameTooLargeError)


@pytest.mark.parametrize(
    "message",
    [
        json.dumps({"type": APPEND, "event_id": "e1", "audio": B64}),
        json.dumps({"audio": B64, "event_id": "e1", "type": APPEND}),  # any key order
        json.dumps({"event_id": "e1", "audio": B64, "type": APPEND}, indent=2),
        # Encoders that escape slashes (PHP's json_encode) write `\/`.
        json.dumps({"type": APPEND, "event_id": "e1", "audio": B64}).replace("/", "\\/"),
        json.dumps({"type": APPEND, "event_id": "e1", "audio": B64}).encode(),  # binary frame
    ],
)
def test_a_large_append_is_read_whatever_its_key_order_or_spacing(message: Frame) -> None:
    assert len(message) > 3 * MAX_EVENT_BYTES
    event = read_event(message)
    assert event == {"type": APPEND, "event_id": "e1", "audio": B64}
    assert audio_of(codec().decode(message)) == AUDIO


BIG = 2 * MAX_EVENT_BYTES


@pytest.mark.parametrize(
    "message",
    [
        # The bulk is in another field than the audio.
        json.dumps({"type": APPEND, "audio": "AAAA", "event_id": "x" * BIG}),
        json.dumps({"type": APPEND, "event_id": "x" * BIG, "audio": "AAAA"}),
        json.dumps({"type": APPEND, "audio": "AAAA", "pad": [0] * BIG}),
        json.dumps({"type": APPEND, "audio": "", "pad": {str(i): i for i in range(BIG // 8)}}),
        # Two large strings: what is left besides the audio is over MAX_APPEND_REST.
        json.dumps({"type": APPEND, "audio": "A" * BIG, "event_id": "B" * BIG}),
        json.dumps({"type": APPEND, "audio": "A" * BIG}) + " " * (MAX_APPEND_REST + 1),
        # The audio of another event, or an audio key that a later one overrides.
        json.dumps({"type": "session.update", "session": {}, "audio": B64}),
        json.dumps({"type": "input_audio_buffer.commit", "audio": B64}),
        f'{{"type": "{APPEND}", "audio": "{B64}", "audio": "AAAA"}}',
        # The audio is not a string, or the frame is not JSON at all.
        f'{{"type": "{APPEND}", "audio": [{"0," * BIG}0]}}',
        "A" * BIG,
        '"' + "A" * BIG + '"',
        f'{{"type": "{APPEND}", "audio": "{B64}',
    ],
)  # fmt: skip
def test_a_large_frame_that_is_not_an_append_of_its_audio_is_too_large(message: str) -> None:
    exc, error = refused(message)
    assert isinstance(exc, FrameTooLargeError), exc
    assert error["code"] == "frame_too_large"


def test_large_audio_that_is_not_plain_base64_is_bad_audio_not_bad_json() -> None:
    # JSON escapes other than `\/` would decode to base64, but no encoder writes them for it.
    escaped = json.dumps({"type": APPEND, "audio": B64}).replace("A", "\\u0041", 1)
    exc, error = refused(escaped)
    assert isinstance(exc, RealtimeFieldError)
    assert (error["code"], error["param"]) == ("invalid_value", "audio")


def test_an_error_about_a_large_append_names_its_event() -> None:
    message = json.dumps({"type": APPEND, "event_id": "big", "audio": B64[:-1] + "!"})
    _, error = refused(message)
    assert (error["event_id"], error["param"]) == ("big", "audio")
