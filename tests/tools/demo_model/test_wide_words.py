"""The wide vocabulary: varied slot values, none of the hotword benchmark's."""

from __future__ import annotations

import random
import re

from tools.demo_model import texts, wide_words
from tools.demo_model.wide_words import HOTWORD_TEST_VALUES, wide_sentence


def test_no_benchmark_value_is_ever_spoken() -> None:
    rng = random.Random(3)
    kept = [v.lower() for values in HOTWORD_TEST_VALUES.values() for v in values]
    for _ in range(5000):
        words = set(wide_sentence(rng).spoken.split())
        assert not words & set(kept)


def test_the_slots_take_many_values_most_of_them_new() -> None:
    rng = random.Random(4)
    base = {v.lower() for slot in ("name", "city") for v in re.split(r"\|", _options(slot))}
    names = set()
    for _ in range(2000):
        sentence = wide_sentence(rng)
        names.update(sentence.spoken.split())
    assert len(names - base) > 500  # made-up words and the longer real lists


def test_written_and_spoken_forms_say_the_same_words() -> None:
    rng = random.Random(5)
    for _ in range(300):
        sentence = wide_sentence(rng)
        assert sentence.spoken == texts.spoken_words(sentence.spoken)
        assert not any(c.isdigit() for c in sentence.spoken)


def test_made_up_words_are_letters_only() -> None:
    rng = random.Random(6)
    words = {wide_words.made_up_word(rng) for _ in range(500)}
    assert len(words) > 400 and all(w.isalpha() and w.islower() for w in words)


def _options(slot: str) -> str:
    """The base sentences' values for `slot`, as its `_choice` was given them."""
    rng = random.Random(0)
    return "|".join(sorted({texts.SLOTS[slot](rng)[0] for _ in range(500)}))
