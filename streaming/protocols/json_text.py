"""What the JSON codecs share: reading one object from a text frame, and a final's tokens."""

from __future__ import annotations

import json
import re
from typing import Any

from streaming.errors import MalformedMessageError
from streaming.events import Final

#: A `\uD800`-`\uDFFF` escape that is not half of a pair: JSON lets it through, but the
#: string it makes cannot be written as UTF-8 again (to a client, a follower, a webhook).
_LONE_SURROGATE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def load_object(text: str | bytes, what: str = "text message") -> dict[str, Any]:
    """The JSON object in a frame (bytes as UTF-8); MalformedMessageError otherwise."""
    try:
        raw = text.decode("utf-8") if isinstance(text, bytes) else text
        obj = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise MalformedMessageError(f"{what} is not valid JSON: {exc}") from exc
    if "\\u" in raw and _LONE_SURROGATE.search(raw):
        raise MalformedMessageError(f"{what} holds an unpaired UTF-16 surrogate escape")
    if not isinstance(obj, dict):
        raise MalformedMessageError(f"{what} must be a JSON object")
    return obj


def stream_tokens(event: Final) -> list[dict[str, Any]]:
    """The final's tokens with their times moved from the utterance's clock to the
    stream's, and their confidence where they were scored."""
    out = []
    for tok in event.transcript.tokens:
        start, end = event.start_ms + tok.start_ms, event.start_ms + tok.end_ms
        entry: dict[str, Any] = {"text": tok.text, "start_ms": start, "end_ms": end}
        out.append(_scored(entry, tok.confidence))
    return out


def stream_words(event: Final) -> list[dict[str, Any]]:
    """The final's words on the stream's clock, with their confidence where scored."""
    return [
        _scored(
            {
                "text": w.text,
                "start_ms": event.start_ms + w.start_ms,
                "end_ms": event.start_ms + w.end_ms,
            },
            w.confidence,
        )
        for w in event.words
    ]


def tag_fields(event: Final) -> dict[str, Any]:
    """Emotion, event, timed tokens and words, each unless the client turned it off, and
    the final's confidence where it was scored."""
    t = event.transcript
    out: dict[str, Any] = {}
    if event.show.get("emotion", True):
        out["emotion"] = t.emotion
    if event.show.get("event", True):
        out["event"] = t.event
    if event.show.get("timestamps", True):
        out["tokens"] = stream_tokens(event)
        out["words"] = stream_words(event)
    return _scored(out, event.confidence)


def _scored(entry: dict[str, Any], confidence: float | None) -> dict[str, Any]:
    if confidence is not None:
        entry["confidence"] = round(confidence, 4)
    return entry
