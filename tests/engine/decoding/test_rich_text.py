"""render_rich_text must equal funasr's rich_transcription_postprocess for every string."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.decoding.rich_text import render_rich_text
from engine.model.tags import EMOTION_TAGS, EVENT_TAGS, KNOWN_TAGS, LANGUAGE_TAGS, tag_piece

_postprocess = pytest.importorskip("funasr.utils.postprocess_utils")
funasr_render: Callable[[str], str] = _postprocess.rich_transcription_postprocess

ALL_TAGS: tuple[str, ...] = tuple(
    tag_piece(name) for names in KNOWN_TAGS.values() for name in names
)


def prefix(lang: str, emotion: str, event: str, itn: str = "woitn") -> str:
    return "".join(tag_piece(name) for name in (lang, emotion, event, itn))


CASES: list[str] = [
    "",
    "hello world",
    "  hello  ",
    *(prefix(lang, "NEUTRAL", "Speech") + " hello world" for lang in LANGUAGE_TAGS),
    *(prefix("en", emotion, "Speech") + " hello world" for emotion in EMOTION_TAGS),
    *(prefix("zh", "NEUTRAL", event, "withitn") + "你好世界" for event in EVENT_TAGS),
    *(prefix("en", emotion, event) for emotion in EMOTION_TAGS for event in EVENT_TAGS),
    "<|nospeech|><|Event_UNK|>",
    "<|nospeech|><|EMO_UNKNOWN|><|Event_UNK|><|woitn|>",
    "<|nospeech|><|Event_UNK|> hello <|nospeech|><|Event_UNK|>",
    # Several language segments, with repeated and changing events and emotions.
    prefix("en", "HAPPY", "BGM") + " one" + prefix("zh", "HAPPY", "BGM") + "二",
    prefix("en", "HAPPY", "BGM") + " one" + prefix("en", "SAD", "BGM") + " two",
    prefix("en", "HAPPY", "BGM") + " one" + prefix("en", "HAPPY", "Applause") + " two",
    prefix("en", "SAD", "Laughter") + prefix("ja", "SAD", "Laughter") + " x",
    "".join(prefix(lang, "ANGRY", "Cry") + lang for lang in ("ko", "yue", "zh")),
    "head text " + prefix("en", "FEARFUL", "Sneeze") + " tail",
    "🎼 head " + prefix("en", "NEUTRAL", "BGM") + " tail",
    # Repeated and mixed tags inside one segment: counts decide the emotion.
    "<|en|><|HAPPY|><|SAD|><|SAD|><|BGM|><|Applause|><|Cough|> words",
    "<|en|><|NEUTRAL|><|HAPPY|> tie with neutral",
    "<|en|><|SURPRISED|><|DISGUSTED|> tie between two",
    "<|en|><|Sneeze|><|Cough|><|Laughter|><|Cry|><|BGM|> many events",
    # Quirks: "The." is blanked, 😷 counts as an event mark, a literal marker splits.
    prefix("en", "NEUTRAL", "Speech") + " The.",
    prefix("en", "NEUTRAL", "Speech") + " The. end. There. The.x",
    "😷 a " + prefix("en", "NEUTRAL", "Speech") + "😷 b",
    "a <|lang|> b",
    "<|en|><|HA<|SAD|>PPY|> spliced",
    "<|en|><|reserved_1|><|HAPPY|> kept",
]


@pytest.mark.parametrize("tagged", CASES)
def test_matches_funasr(tagged: str) -> None:
    assert render_rich_text(tagged) == funasr_render(tagged)


def test_example_output() -> None:
    assert render_rich_text(prefix("en", "HAPPY", "BGM") + " hello") == "🎼hello😊"
    assert render_rich_text("<|nospeech|><|Event_UNK|>") == "❓"


WORDS: tuple[str, ...] = (
    " hello",
    "world",
    " ",
    "  ",
    "你好",
    "The.",
    " The. ",
    ".",
    "😊",
    "🎼",
    "😷",
    "❓",
    "<|",
    "|>",
    "<|HA",
    "PPY|>",
    "<|lang|>",
    "<|reserved_1|>",
)

pieces = st.one_of(
    st.sampled_from(ALL_TAGS),
    st.sampled_from(WORDS),
    st.text(max_size=4),
)


@settings(max_examples=400)
@given(st.lists(pieces, max_size=24))
def test_random_sequences_match_funasr(parts: list[str]) -> None:
    tagged = "".join(parts)
    assert render_rich_text(tagged) == funasr_render(tagged)
