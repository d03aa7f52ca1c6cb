"""PII sentences: values the redaction rules are built for, said as they are written."""

from __future__ import annotations

import random
import re

import pytest

from tools.demo_model import texts
from tools.demo_model.pii_texts import KINDS, luhn_complete, pii_sentence

DIGIT_WORDS = {texts.words(d): str(d) for d in range(10)} | {"oh": "0"}


def _luhn(digits: str) -> bool:
    """The Luhn check, written out here (not the code under test's)."""
    doubled = [int(c) * (2 if i % 2 else 1) for i, c in enumerate(reversed(digits))]
    return sum(d // 10 + d % 10 for d in doubled) % 10 == 0


def test_luhn_completion_makes_known_card_numbers() -> None:
    assert luhn_complete("411111111111111") == "4111111111111111"
    assert luhn_complete("555555555555444") == "5555555555554444"
    rng = random.Random(1)
    for _ in range(500):
        assert _luhn(luhn_complete("".join(str(rng.randint(0, 9)) for _ in range(15))))


@pytest.mark.parametrize("kind", ["card", "card_half", "phone", "ssn", "card_groups", "card_bare"])
def test_digits_are_said_one_by_one_as_written(kind: str) -> None:
    rng = random.Random(2)
    for _ in range(200):
        pii = pii_sentence(rng, kind)
        said = [DIGIT_WORDS[w] for w in pii.sentence.spoken.split() if w in DIGIT_WORDS]
        assert re.sub(r"\D", "", pii.values[0]) in "".join(said)  # "eight digits" says one too
        assert pii.values[0] in pii.sentence.written


def test_the_written_forms_are_those_redaction_expects() -> None:
    rng = random.Random(3)
    forms = {
        "card": r"(\d{4} ){3}\d{4}",
        "card_half": r"\d{4} \d{4}",
        "expiry": r"(0[1-9]|1[0-2])/\d{2}",
        "code": r"\d{3}",
        "phone": r"\d{3}-\d{3}-\d{4}",
        "ssn": r"\d{3}-\d{2}-\d{4}",
        "email": r"[a-z]+(\.[a-z]+)?@[a-z]+\.(com|org|net)",
        "card_groups": r"(\d{4} ){3}\d{4}",
        "card_bare": r"(\d{4} ){3}\d{4}",
    }
    for kind in KINDS:
        for _ in range(100):
            pii = pii_sentence(rng, kind)
            assert re.fullmatch(forms[kind], pii.values[0]), (kind, pii.values[0])
            if kind.startswith("card") and kind != "card_half":
                assert _luhn(pii.values[0].replace(" ", ""))


def test_an_email_is_said_with_dot_and_at() -> None:
    rng = random.Random(4)
    for _ in range(50):
        pii = pii_sentence(rng, "email")
        said = pii.values[0].replace(".", " dot ").replace("@", " at ")
        assert " ".join(said.split()) in pii.sentence.spoken


def test_an_expiry_says_its_month_and_year() -> None:
    rng = random.Random(5)
    for _ in range(100):
        pii = pii_sentence(rng, "expiry")
        month, year = (int(p) for p in pii.values[0].split("/"))
        spoken = pii.sentence.spoken
        assert texts.words(month) in spoken and texts.words(year) in spoken


def test_every_kind_is_drawn_and_the_spoken_form_has_no_digits() -> None:
    rng = random.Random(6)
    drawn = [pii_sentence(rng) for _ in range(700)]
    assert {p.kind for p in drawn} == set(KINDS)
    assert all(p.sentence.spoken == texts.spoken_words(p.sentence.spoken) for p in drawn)


def test_every_value_to_redact_is_listed_and_no_other() -> None:
    rng = random.Random(7)
    for _ in range(300):
        pii = pii_sentence(rng, "expiry")
        assert len(pii.values) == (2 if "code is" in pii.sentence.written else 1)
        assert all(v in pii.sentence.written for v in pii.values)
        phone = pii_sentence(rng, "phone")
        assert len(phone.values) == 1  # "after 5:07 PM" is no one's secret


@pytest.mark.parametrize("kind", ["card_groups", "card_bare"])
def test_a_card_read_in_groups_pauses_after_each_group_of_four(kind: str) -> None:
    rng = random.Random(9)
    for _ in range(100):
        pii = pii_sentence(rng, kind)
        groups = [g.strip(" .") for g in pii.sentence.said.split(",")]
        digits = ["".join(DIGIT_WORDS[w] for w in g.split() if w in DIGIT_WORDS) for g in groups]
        assert [d for d in digits if d] == pii.values[0].split()
        if kind == "card_bare":  # nothing but the digits, and nothing to end a sentence
            assert set(pii.sentence.spoken.split()) <= set(DIGIT_WORDS)
            assert pii.sentence.written == pii.values[0]
