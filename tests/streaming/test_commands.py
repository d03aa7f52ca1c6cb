"""streaming.commands' hotword helpers: phrases from each protocol's forms, merged, and a
prompt read as hotwords only when it lists phrases."""

from __future__ import annotations

import pytest

from engine.types import DEFAULT_HOTWORD_BOOST, MAX_HOTWORD_BOOST, Hotword
from streaming.commands import hotwords_from, prompt_keywords
from streaming.errors import InvalidFieldError


@pytest.mark.parametrize(
    ("prompt", "phrases"),
    [
        ("Acme Corp, Kowalski, Nighthawk", ("Acme Corp", "Kowalski", "Nighthawk")),
        ("Acme Corp;  Kowalski\nNighthawk\n", ("Acme Corp", "Kowalski", "Nighthawk")),
        ("SenseStream", ("SenseStream",)),
        ("Acme, Acme", ("Acme",)),
        ("", ()),
        (" , ;\n", ()),
        ("The call is about a broken router and a refund.", ()),
        ("Acme. Kowalski", ()),  # sentences, not a list
        ("Acme Corp, the customer who called yesterday about it", ()),  # one item too long
    ],
)
def test_a_prompt_is_hotwords_only_when_it_lists_phrases(
    prompt: str, phrases: tuple[str, ...]
) -> None:
    assert prompt_keywords(prompt) == phrases


def test_hotwords_from_phrases_or_weights() -> None:
    assert hotwords_from(["a  b", "a b", "c"]) == (Hotword("a b"), Hotword("c"))
    assert hotwords_from({"a": 3}) == (Hotword("a", 3.0),)
    assert hotwords_from({"a": 30, "b": 0}, scale=0.5, clamp=True) == (
        Hotword("a", MAX_HOTWORD_BOOST),
        Hotword("b", 0.1),
    )
    assert hotwords_from(["x"])[0].boost == DEFAULT_HOTWORD_BOOST
    with pytest.raises(InvalidFieldError, match="boost"):
        hotwords_from({"a": 30})
    with pytest.raises(InvalidFieldError, match="characters"):
        hotwords_from([" "])
