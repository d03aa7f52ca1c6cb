"""AudioHook transcripts, as its transcription-connector form defines them; languages.

A final goes to the client as an `event` message with one entity of type `transcript`:
its `channelId` (the index of its channel in the media `opened` chose), `isFinal`,
`offset` and `duration` (positions on AudioHook's timeline), and one alternative whose
`display` interpretation holds the text and its words, each with its own offset and
duration. Confidence (required, 0 to 1) is the engine's: each word's, and the
transcript's mean over its words; where nothing was scored (the server's
`--no-confidence`, or a decode before the scored graph was ready) it says 1.0, and a
redacted word takes the transcript's. Languages are BCP 47 tags, as Genesys names them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

from streaming.events import Final as FinalEvent
from streaming.protocols.audiohook.messages import format_duration
from streaming.protocols.openai.files import words

#: What a transcript or word says where nothing was scored: AudioHook requires a value.
UNSCORED: Final = 1.0
#: What `opened` lists when asked (`supportedLanguages`): SenseVoice's languages, in the
#: regional forms Genesys names them by (any English accent is English to the model).
SUPPORTED_LANGUAGES: Final = (
    "en-US",
    "en-GB",
    "en-AU",
    "en-CA",
    "en-IE",
    "en-IN",
    "en-NZ",
    "en-ZA",
    "zh-CN",
    "yue-HK",
    "ja-JP",
    "ko-KR",
)
_BY_SUBTAG: Final[Mapping[str, str]] = {
    "en": "en",
    "zh": "zh",
    "cmn": "zh",
    "yue": "yue",
    "ja": "ja",
    "ko": "ko",
}
#: Chinese of Hong Kong and Macau may be Cantonese or Mandarin: the model tells them apart.
_DETECTED: Final = frozenset({"zh-hk", "zh-mo"})
#: The tag a transcript names when the model heard a language the client did not ask for.
_TAGS: Final[Mapping[str, str]] = {
    "en": "en-US",
    "zh": "zh-CN",
    "yue": "yue-HK",
    "ja": "ja-JP",
    "ko": "ko-KR",
}
#: Transcript ids are UUIDs derived from the session's, so each is the same on a replay.
_NAMESPACE: Final = uuid.UUID("6f1c3a52-8d0e-4f4b-9a51-2c7d3e9b8a10")


def stream_language(tag: str | None) -> str:
    """A client's language tag (`en-US`) as the model's language (`en`); else `auto`."""
    if not tag or tag.lower() in _DETECTED:
        return "auto"
    return _BY_SUBTAG.get(tag.lower().split("-")[0], "auto")


def language_tag(heard: str, requested: str | None) -> str | None:
    """The tag a transcript names: the client's own when the model heard that language."""
    if heard not in _TAGS:
        return None  # "unknown", "nospeech": no language to name
    if requested is not None and stream_language(requested) == heard:
        return requested
    return _TAGS[heard]


def transcript_id(session_id: str, channel: int, utt_id: int) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{session_id}/{channel}/{utt_id}"))


def transcript_entity(
    final: FinalEvent,
    entity_id: str,
    position_ms: Callable[[int], int],
    language: str | None,
    with_words: bool = True,
) -> dict[str, Any]:
    """The `transcript` entity of one final; `position_ms` maps stream times to positions."""
    start, end = position_ms(final.start_ms), position_ms(final.end_ms)
    display: dict[str, Any] = {"type": "display", "transcript": final.transcript.text.strip()}
    if with_words:
        display["tokens"] = _word_tokens(final, position_ms, language)
    overall = final.confidence
    alternative: dict[str, Any] = {"confidence": _value(overall, UNSCORED)}
    if language is not None:
        alternative["languages"] = [language]
    alternative["interpretations"] = [display]
    data = {
        "id": entity_id,
        "channelId": final.channel or 0,
        "isFinal": True,
        "offset": format_duration(start),
        "duration": format_duration(end - start),
        "alternatives": [alternative],
    }
    return {"type": "transcript", "data": data}


def _word_tokens(
    final: FinalEvent, position_ms: Callable[[int], int], language: str | None
) -> list[dict[str, Any]]:
    tokens = []
    overall = final.confidence
    for word in words(final):  # times in seconds, on the stream's clock
        start = position_ms(round(word["start"] * 1000))
        end = max(start, position_ms(round(word["end"] * 1000)))
        token: dict[str, Any] = {
            "type": "word",
            "value": word["word"],
            "confidence": _value(word.get("confidence"), overall, UNSCORED),
            "offset": format_duration(start),
            "duration": format_duration(end - start),
        }
        if language is not None:
            token["language"] = language
        tokens.append(token)
    return tokens


def _value(*choices: float | None) -> float:
    """The first known of `choices` (the last is always known), within 0..1, rounded."""
    known = next(c for c in choices if c is not None)
    return round(min(max(known, 0.0), 1.0), 4)
