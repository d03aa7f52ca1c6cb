"""The redaction benchmark's judging: what counts as caught, recall and precision."""

from __future__ import annotations

import re

from tools.bench.redaction import (
    HAND_CASES,
    KIND_COUNTS,
    case,
    caught,
    generated_cases,
    score,
)
from tools.demo_model import texts

CARD = case("the card is four one one one", "pci numbers", "4111")
MONEY = case("forty two dollars and fifty cents", "numbers", "4250")
NONE = case("please hold the line", "")


def test_caught_needs_the_placeholder_and_no_secret_left() -> None:
    assert caught("The card is [PCI].", CARD, "pci")
    assert not caught("The card is 4111 [PCI].", CARD, "pci")  # a part still shows
    assert not caught("The card is 4111.", CARD, "pci")
    assert not caught("The card is [NUMBERS].", CARD, "pci")  # another policy's
    assert caught("It is $[NUMBERS].", MONEY, "numbers")
    assert not caught("It is $42.50.", MONEY, "numbers")  # "42.50" is the secret "4250"


def test_recall_and_precision_per_policy() -> None:
    rows = [
        (CARD, "The card is [PCI]."),
        (CARD, "The card is 4111."),
        (NONE, "Please [PCI] the line."),
        (MONEY, "It is $[NUMBERS]."),
    ]
    pci = score("pci", rows)
    assert (pci["sentences"], pci["caught"], pci["recall"]) == (2, 1, 0.5)
    assert (pci["marked"], pci["precision"]) == (2, 0.5) and not pci["passes"]
    numbers = score("numbers", rows)
    assert (numbers["sentences"], numbers["caught"], numbers["marked"]) == (3, 1, 1)
    assert numbers["precision"] == 1.0 and numbers["recall"] == 1 / 3
    assert score("email", rows)["recall"] is None


def test_every_policy_has_sentences_and_there_are_negatives() -> None:
    for policy in ("pci", "ssn", "phone", "email", "numbers"):
        assert any(policy in c.policies for c in HAND_CASES), policy
    assert sum(not c.policies for c in HAND_CASES) >= 5


def test_a_word_secret_is_matched_as_a_word() -> None:
    email = case("my email is anna at mail dot com", "email", "anna", "mail", "com")
    assert caught("My email is [EMAIL].", email, "email")  # "mail" inside "EMAIL" is not it
    assert not caught("My email is anna [EMAIL].", email, "email")


def test_generated_cases_are_held_out_and_cover_every_kind_with_its_values() -> None:
    cases = generated_cases()
    assert len(cases) == sum(KIND_COUNTS.values()) and cases == generated_cases()
    assert all(pii_sentence_held_out(c.spoken) for c in cases)
    for policy in ("pci", "ssn", "phone", "email"):
        assert sum(policy in c.policies for c in cases) >= 20, policy
    card = next(c for c in cases if c.spoken.startswith(("my card", "the card number")))
    digits = "".join(card.secret)
    assert len(digits) == 16 and all(len(group) == 4 for group in card.secret)
    assert all(c.secret for c in cases)


def pii_sentence_held_out(spoken: str) -> bool:
    return texts.Sentence("", spoken).held_out


def test_cards_read_in_groups_and_bare_are_in_the_set_and_said_with_pauses() -> None:
    cases = generated_cases()
    grouped = [c for c in cases if c.said.count(",") >= 3]
    assert len(grouped) >= 20 and all(c.policies == {"pci", "numbers"} for c in grouped)
    digit_words = {"zero", "oh", "one", "two", "three", "four", "five", "six", "seven",
                   "eight", "nine"}  # fmt: skip
    bare = [c for c in grouped if set(c.spoken.split()) <= digit_words]
    assert len(bare) >= 10
    for c in grouped:  # four groups of four said digits, a pause after each but the last
        groups = [re.findall(r"[a-z]+", g)[-4:] for g in c.said.split(",")]
        assert all(set(g) <= digit_words and len(g) == 4 for g in groups[-4:])
