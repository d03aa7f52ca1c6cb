"""The open vocabulary: broad, held words never said, and written forms that say what the
audio says (checked against a reading of the spoken words written here, not the module's)."""

from __future__ import annotations

import random
import re

import pytest

from tools.demo_model import open_texts, texts
from tools.demo_model.open_texts import Lexicon, open_sentence
from tools.demo_model.wide_words import HOTWORD_TEST_VALUES


@pytest.fixture(scope="module")
def lex() -> Lexicon:
    return Lexicon.load()


#: Digit words: units, then teens and tens ("forty one" is two digits of a pair).
UNIT_WORDS = "zero one two three four five six seven eight nine"
TEEN_WORDS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen"
TENS_WORDS = "twenty thirty forty fifty sixty seventy eighty ninety"
UNITS = {w: i for i, w in enumerate(UNIT_WORDS.split())} | {"oh": 0}
TEENS = {w: 10 + i for i, w in enumerate(TEEN_WORDS.split())}
TENS = {w: 10 * (i + 2) for i, w in enumerate(TENS_WORDS.split())}


def digits_said(words: list[str]) -> str:
    """The digit string a caller's words spell: units one by one, "double"/"triple" a unit,
    a teen or a tens word (with its unit) two digits, "hundred" after a pair "00"."""
    out, i = "", 0
    while i < len(words):
        word = words[i]
        if word in ("double", "triple"):
            out += str(UNITS[words[i + 1]]) * (2 if word == "double" else 3)
            i += 2
        elif word in UNITS:
            out += str(UNITS[word])
            i += 1
        elif word in TEENS:
            out += str(TEENS[word])
            i += 1
        elif word in TENS:
            unit = words[i + 1] if i + 1 < len(words) and words[i + 1] in UNITS else None
            out += str(TENS[word] + (UNITS[unit] if unit and unit != "oh" else 0))
            i += 2 if unit and unit != "oh" else 1
        elif word == "hundred":
            out += "00"
            i += 1
        else:
            raise ValueError(f"not a digit word: {word}")
    return out


def test_the_lists_are_broad(lex: Lexicon) -> None:
    assert len(lex.words) >= 30000
    assert len(lex.first_names) >= 5000 and len(lex.surnames) >= 1000
    rng = random.Random(1)
    said = {w for _ in range(2000) for w in open_sentence(lex, rng, "words").spoken.split()}
    assert len(said) > 5000


def test_no_hotword_benchmark_value_is_ever_said(lex: Lexicon) -> None:
    held = {v.lower() for values in HOTWORD_TEST_VALUES.values() for v in values}
    rng = random.Random(2)
    for _ in range(6000):
        sentence = open_sentence(lex, rng)
        words = set(re.findall(r"[a-z']+", sentence.written.lower() + " " + sentence.spoken))
        assert not {w for w in words if w.startswith(tuple(held))}, sentence


@pytest.mark.parametrize("kind", list(open_texts.KINDS))
def test_the_spoken_form_is_plain_lowercase_words(lex: Lexicon, kind: str) -> None:
    rng = random.Random(3)
    for _ in range(300):
        sentence = open_sentence(lex, rng, kind)
        assert sentence.spoken == texts.spoken_words(sentence.spoken) != ""
        assert texts.spoken_words(sentence.voiced) != ""


def test_written_digits_are_the_digits_said(lex: Lexicon) -> None:
    rng = random.Random(4)
    bare = grouped = 0
    for _ in range(600):
        sentence = open_sentence(lex, rng, "numbers")
        digits = re.findall(r"\d+", sentence.written)
        said = [w for w in sentence.spoken.split() if w in UNITS or w in TEENS or w in TENS
                or w in ("double", "triple", "hundred")]  # fmt: skip
        assert "".join(digits) == digits_said(said), sentence
        bare += sentence.written[0].isdigit()
        # Groups said with pauses are written as groups: one comma a group boundary.
        if len(digits) > 1:
            grouped += 1
            assert sentence.voiced.count(",") >= len(digits) - 1
    assert 200 < bare < 400 and grouped > 100


def test_callers_ways_of_reading_digits_all_occur(lex: Lexicon) -> None:
    rng = random.Random(5)
    said = " ".join(open_sentence(lex, rng, "numbers").spoken for _ in range(600)).split()
    for way in ("double", "triple", "oh", "zero"):
        assert way in said
    assert set(TENS) & set(said)  # pairs: "forty one"


def test_a_spelled_name_says_its_letters(lex: Lexicon) -> None:
    rng = random.Random(6)
    for _ in range(300):
        sentence = open_sentence(lex, rng, "spelled")
        capitals = re.findall(r"\b[A-Z]\b", sentence.written)
        spoken = sentence.spoken.split()
        assert spoken[-len(capitals) :] == [c.lower() for c in capitals]
        # The synthesiser hears "ay" for the letter a, which alone reads as the article.
        voiced = re.sub(r"[^a-z ]", "", sentence.voiced.lower()).split()[-len(capitals) :]
        assert voiced == ["ay" if c == "A" else c.lower() for c in capitals]


def test_an_email_address_is_said_as_written(lex: Lexicon) -> None:
    rng = random.Random(7)
    for _ in range(300):
        sentence = open_sentence(lex, rng, "email")
        (address,) = re.findall(r"\S+@\S+[a-z]", sentence.written)
        local, domain = address.split("@")
        said_domain = sentence.spoken.split(" at ")[-1].split()
        assert ".".join(w for w in said_domain if w != "dot") == domain.split(",")[0] or (
            " dot ".join(domain.split(".")) in sentence.spoken
        )
        letters = re.sub(r"[^a-z]", "", local)
        said_local = sentence.spoken.split(" at ")[-2].split()
        said_letters = "".join(
            w for w in said_local if w not in ("dot", "underscore") and w not in UNITS
            and w not in TEENS and w not in TENS
        )  # fmt: skip
        assert said_letters.endswith(letters)
        number = re.sub(r"\D", "", local)
        if number:
            assert (
                digits_said([w for w in said_local if w in UNITS or w in TEENS or w in TENS])
                == number
            )


def test_names_are_written_capitalised_wherever_they_are_said(lex: Lexicon) -> None:
    rng = random.Random(8)
    proper = {n.lower() for n in lex.proper_names}
    for _ in range(500):
        sentence = open_sentence(lex, rng, "words")
        for word in sentence.written.rstrip(".").split():
            if word.lower() in proper:
                assert word[0].isupper(), sentence


def test_held_out_sentences_are_distinct_and_never_trained_on(lex: Lexicon) -> None:
    out = open_texts.held_out(lex, 11, 40)
    assert len({s.spoken for s in out}) == 40 and all(s.held_out for s in out)
