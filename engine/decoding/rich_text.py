"""Render a tagged SenseVoice string as emoji rich text, exactly as funasr does.

The output must equal funasr's `rich_transcription_postprocess` for every input (clients compare
against it), so its quirks are kept on purpose and each one is marked where it happens.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

# Language tags split the string into segments that are rendered one by one.
LANGUAGE_PIECES: tuple[str, ...] = (
    "<|zh|>",
    "<|en|>",
    "<|yue|>",
    "<|ja|>",
    "<|ko|>",
    "<|nospeech|>",
)
# funasr's own segment marker; a literal occurrence in the input splits too, as in funasr.
SEGMENT_BREAK = "<|lang|>"

# "No speech, unknown event" is shown as one mark before the string is split by language.
NO_SPEECH_UNKNOWN_EVENT = "<|nospeech|><|Event_UNK|>"
NO_SPEECH_UNKNOWN_MARK = "❓"

# Listing order matters: it breaks ties between equally frequent emotions.
EMOTION_EMOJI: Mapping[str, str] = MappingProxyType(
    {
        "<|HAPPY|>": "😊",
        "<|SAD|>": "😔",
        "<|ANGRY|>": "😡",
        "<|NEUTRAL|>": "",
        "<|FEARFUL|>": "😰",
        "<|DISGUSTED|>": "🤢",
        "<|SURPRISED|>": "😮",
    }
)
DEFAULT_EMOTION = "<|NEUTRAL|>"

# Listing order matters: each present event is put in front, so the last listed comes first.
# Cough shares Sneeze's 🤧 (funasr's table maps it so); Sing, Speech_Noise, GBG and Event_UNK
# are stripped without a mark.
EVENT_EMOJI: Mapping[str, str] = MappingProxyType(
    {
        "<|BGM|>": "🎼",
        "<|Speech|>": "",
        "<|Applause|>": "👏",
        "<|Laughter|>": "😀",
        "<|Cry|>": "😭",
        "<|Sneeze|>": "🤧",
        "<|Breath|>": "",
        "<|Cough|>": "🤧",
    }
)

EVENT_ORDER: tuple[str, ...] = tuple(EVENT_EMOJI)

# Tags removed from a segment, in funasr's order: removing one can splice the text around it
# into another tag, so only this order gives identical output.
STRIPPED_PIECES: tuple[str, ...] = (
    "<|HAPPY|>",
    "<|SAD|>",
    "<|ANGRY|>",
    "<|NEUTRAL|>",
    "<|BGM|>",
    "<|Speech|>",
    "<|Applause|>",
    "<|Laughter|>",
    "<|FEARFUL|>",
    "<|DISGUSTED|>",
    "<|SURPRISED|>",
    "<|Cry|>",
    "<|EMO_UNKNOWN|>",
    "<|Sneeze|>",
    "<|Breath|>",
    "<|Cough|>",
    "<|Sing|>",
    "<|Speech_Noise|>",
    "<|withitn|>",
    "<|woitn|>",
    "<|GBG|>",
    "<|Event_UNK|>",
)

# Marks recognised when merging segments. 😷 is funasr's cough mark in a table it never
# applies, but it still counts as an event mark when it appears in the text.
EMOTION_MARKS = frozenset("😊😔😡😰🤢😮")
EVENT_MARKS = frozenset("🎼👏😀😭🤧😷")

# funasr removes one space on each side of every emotion or event mark.
_SPACES_AROUND_MARK = re.compile(" ?([" + "".join(sorted(EMOTION_MARKS | EVENT_MARKS)) + "]) ?")


def render_rich_text(tagged: str) -> str:
    """Turn `<|en|><|HAPPY|><|BGM|><|woitn|>hello` into `🎼hello😊`, as funasr does."""
    marked = tagged.replace(NO_SPEECH_UNKNOWN_EVENT, NO_SPEECH_UNKNOWN_MARK)
    for piece in LANGUAGE_PIECES:
        marked = marked.replace(piece, SEGMENT_BREAK)
    head, *rest = (_render_segment(part) for part in marked.split(SEGMENT_BREAK))
    out = " " + head
    # funasr reads the event from " " + head, so the head's own event is never deduplicated.
    previous_event: str | None = None
    for rendered in rest:
        segment = _drop_carried_event(rendered, previous_event)
        if not segment:
            continue
        previous_event = _leading_event(segment)
        emotion = _trailing_emotion(segment)
        if emotion is not None and emotion == _trailing_emotion(out):
            # A repeated emotion is shown once, after the later segment.
            out = out[:-1]
        out += segment.strip()
    # funasr replaces every "The." with a space, even mid-sentence; kept for identical output.
    return out.replace("The.", " ").strip()


def _render_segment(segment: str) -> str:
    """Strip a segment's tags; prefix its event marks and suffix its main emotion's mark."""
    counts: dict[str, int] = {}
    text = segment
    for piece in STRIPPED_PIECES:
        counts[piece] = text.count(piece)
        text = text.replace(piece, "")
    events = "".join(EVENT_EMOJI[piece] for piece in reversed(EVENT_ORDER) if counts[piece] > 0)
    rendered = events + text + EMOTION_EMOJI[_dominant_emotion(counts)]
    return _SPACES_AROUND_MARK.sub(r"\1", rendered).strip()


def _drop_carried_event(segment: str, previous_event: str | None) -> str:
    """Drop a leading event mark that carries on from the previous segment (shown once)."""
    event = _leading_event(segment)
    if event is not None and event == previous_event:
        return segment[1:]
    return segment


def _dominant_emotion(counts: Mapping[str, int]) -> str:
    """The most frequent emotion; it must beat NEUTRAL strictly, earlier entries win ties."""
    best = DEFAULT_EMOTION
    for piece in EMOTION_EMOJI:
        if counts[piece] > counts[best]:
            best = piece
    return best


def _leading_event(text: str) -> str | None:
    return text[0] if text and text[0] in EVENT_MARKS else None


def _trailing_emotion(text: str) -> str | None:
    return text[-1] if text and text[-1] in EMOTION_MARKS else None
