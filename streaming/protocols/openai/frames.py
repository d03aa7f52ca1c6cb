"""One Realtime client event read from its frame within the size caps.

An `input_audio_buffer.append` may carry 15 MiB of base64 audio; no other event needs more
than a few KiB, and a client that sends megabytes of anything else is broken or hostile:
parsing and refusing one cost the event loop, shared by every stream of the worker, up to
seconds. So a frame of up to MAX_EVENT_BYTES is read as JSON, and a larger one only as an
append whose bulk is its audio, found without parsing the bulk: the string around the
middle of the frame (audio that is all of a frame but MAX_APPEND_REST, a quarter of the cap,
holds its middle). The rest of the frame, with a marker in that string's place, is parsed
alone and must be an append whose `audio` is the marker. Anything else over the cap is
`FrameTooLargeError` (fatal, 1009), as a frame over the WebSocket library's own cap is.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from streaming.errors import FrameTooLargeError, MalformedMessageError
from streaming.protocols.base import Frame
from streaming.protocols.json_text import load_object

#: The largest event other than an append with large audio: 1000 keywords of 64 characters,
#: the most a session may have, take about 70 KiB (200 KiB in Chinese, 3 bytes a character).
MAX_EVENT_BYTES = 256 * 1024
#: What a large append may hold besides its audio: its type, event id and punctuation.
MAX_APPEND_REST = 64 * 1024
APPEND = "input_audio_buffer.append"
WHAT = "the client event"


def read_event(message: Frame) -> Mapping[str, Any]:
    """The client event in a frame (a binary one as UTF-8 text); raises MalformedMessageError
    for one that is not a JSON object, FrameTooLargeError for one over the caps."""
    if isinstance(message, bytes):
        size = len(message)
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError as exc:
            if size > MAX_EVENT_BYTES:  # no append either: the size is the error
                raise _too_large(size) from None
            raise MalformedMessageError(f"{WHAT} is not valid UTF-8: {exc}") from exc
    else:
        text = message
        # Bytes need counting only in a non-ASCII text that could fit: one of more characters
        # than the cap is over it in bytes too. (surrogatepass: a str may hold a lone one.)
        multibyte = len(text) <= MAX_EVENT_BYTES and not text.isascii()
        size = len(text.encode("utf-8", "surrogatepass")) if multibyte else len(text)
    if size <= MAX_EVENT_BYTES:
        return load_object(text, WHAT)
    return _large_append(text, size)


def _large_append(text: str, size: int) -> Mapping[str, Any]:
    middle = len(text) // 2
    start = text.rfind('"', 0, middle) + 1
    end = text.find('"', middle)
    if start == 0 or end < 0 or len(text) - (end - start) > MAX_APPEND_REST:
        raise _too_large(size)
    # A random marker: no client can have written it, so an `audio` equal to it is the
    # string cut out, whole (not another field's value, nor the tail of a string that
    # began before the cut: that would hold the opening quote).
    marker = uuid.uuid4().hex
    try:
        event = load_object(text[:start] + marker + text[end:], WHAT)
    except MalformedMessageError:
        raise _too_large(size) from None
    if event.get("type") != APPEND or event.get("audio") != marker:
        raise _too_large(size)
    audio = text[start:end]
    # JSON's `\/` is how some encoders (PHP's) write base64's slash; any other escape, or a
    # backslash before the closing quote, is not base64, and the append refuses it as such.
    return {**event, "audio": audio.replace("\\/", "/") if "\\" in audio else audio}


def _too_large(size: int) -> FrameTooLargeError:
    return FrameTooLargeError(
        f"a client event of {size} bytes or more is over the {MAX_EVENT_BYTES} byte limit: "
        f"only an {APPEND} may be larger, by its base64 audio alone"
    )
