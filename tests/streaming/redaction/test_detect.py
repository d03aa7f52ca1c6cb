"""What each policy finds, and what it leaves alone."""

from __future__ import annotations

import pytest

from streaming.redaction.apply import redact_text
from streaming.redaction.detect import DIGIT_RUN, find, luhn_valid
from streaming.redaction.policies import Policy

ALL = frozenset(Policy)
PCI = frozenset({Policy.PCI})


def shown(text: str, policies: frozenset[Policy], context: str = "", mask: bool = False) -> str:
    return redact_text(text, find(text, policies, context), mask)


def test_luhn() -> None:
    assert luhn_valid("4111111111111111") and luhn_valid("5555555555554444")
    assert luhn_valid("378282246310005")  # Amex, 15 digits
    assert not luhn_valid("4111111111111112") and not luhn_valid("1234567812345678")


@pytest.mark.parametrize(
    "text",
    [
        "My card number is 4111 1111 1111 1111.",
        "It is 4111-1111-1111-1111, thanks.",
        "4111111111111111",
        "The amex is 3782 822463 10005.",
    ],
)
def test_a_luhn_valid_card_is_redacted_with_or_without_card_words(text: str) -> None:
    out = shown(text, PCI)
    assert "[PCI]" in out and not any(ch.isdigit() for ch in out)


@pytest.mark.parametrize(
    "text",
    [
        "Your balance is $1234.56.",
        "I was charged $4111 twice.",
        "Your appointment is at 3:30 PM on January 25th.",
        "You get 15% off this month.",
        "Your order number is 1234567812345678.",  # 16 digits, not Luhn-valid, no card words
        "The store opened in 1998.",
    ],
)
def test_pci_leaves_money_times_dates_and_other_numbers(text: str) -> None:
    assert shown(text, PCI) == text


def test_with_card_words_codes_expiry_dates_and_parts_are_redacted() -> None:
    assert shown("The security code is 123.", PCI) == "The security code is [PCI]."
    assert shown("The card expires 05/27.", PCI) == "The card expires [PCI]."
    assert shown("My visa starts with 4111 1111.", PCI) == "My visa starts with [PCI]."
    # The card words may be in the utterance before, when it left them open.
    assert shown("It is 4111 1111.", PCI, context="What is your card number?") == "It is [PCI]."
    # Once its digits were said, the next utterance's numbers are another's.
    after = "The last digits of the card are 41111111."
    assert shown("Your reference is 97543.", PCI, context=after) == "Your reference is 97543."
    # Money is money even while a card is talked about.
    assert shown("Charge $120 to the card.", PCI) == "Charge $120 to the card."


def test_a_mask_keeps_the_length_and_the_separators() -> None:
    assert shown("Card 4111 1111 1111 1111.", PCI, mask=True) == "Card **** **** **** ****."


def test_ssn_phone_email_numbers() -> None:
    assert shown("It is 123-45-6789.", ALL) == "It is [SSN]."
    assert shown("My social security number is 123456789.", ALL) == (
        "My social security number is [SSN]."
    )
    assert shown("Call me on 555 123 4567.", ALL) == "Call me on [PHONE]."
    assert shown("Our office is +44 20 7946 0958.", ALL) == "Our office is [PHONE]."
    assert shown("Call 123-4567 today.", ALL) == "Call [PHONE] today."
    assert shown("Mail jane.doe@example.com now.", ALL) == "Mail [EMAIL] now."
    assert shown("It is jane dot doe at example dot com.", ALL) == "It is [EMAIL]."
    assert shown("Order 12345 is late.", ALL) == "Order [NUMBERS] is late."
    assert shown("I have 123 questions.", ALL) == "I have 123 questions."


def test_each_policy_only_when_asked() -> None:
    text = "Call 555 123 4567 or mail a@b.com about order 98765."
    assert shown(text, frozenset({Policy.EMAIL})) == (
        "Call 555 123 4567 or mail [EMAIL] about order 98765."
    )
    assert shown(text, frozenset({Policy.NUMBERS})) == (
        "Call [NUMBERS] or mail a@b.com about order [NUMBERS]."
    )


SSN = frozenset({Policy.SSN})
PHONE = frozenset({Policy.PHONE})


def test_a_social_security_number_with_a_digit_misheard_is_still_one() -> None:
    # Speech recognition drops or doubles a digit of a long run read aloud.
    for said in ("123456789", "1234556789", "61957714"):
        text = f"My social security number is {said}."
        assert shown(text, SSN) == "My social security number is [SSN].", said
    assert shown("My SSN is 5300707554.", SSN) == "My SSN is [SSN]."
    assert shown("My order number is 12345678.", SSN) == "My order number is 12345678."


def test_a_phone_number_with_a_digit_dropped_is_still_one_where_a_call_is_asked() -> None:
    assert shown("Please call 438506037 after 5 AM.", PHONE) == "Please call [PHONE] after 5 AM."
    assert shown("My mobile is 55512345.", PHONE) == "My mobile is [PHONE]."


def test_a_card_or_social_security_number_is_not_a_phone_number() -> None:
    for text in (
        "My card number is 411111111111111.",  # a digit dropped: 15, a phone's length
        "My social security number is 0387645567.",
        "My SSN is 5300707554.",
    ):
        assert shown(text, PHONE) == text
    assert shown("My account number is 12345678.", PHONE) == "My account number is 12345678."


def test_groups_joined_by_a_comma_and_space_or_a_double_space_are_one_run() -> None:
    assert [m.group() for m in DIGIT_RUN.finditer("4111, 1111,  1111  1111.")] == [
        "4111, 1111,  1111  1111"
    ]
    # A bare comma is a thousands separator, and short groups are a list, not a number.
    assert [m.group() for m in DIGIT_RUN.finditer("$1,234 for 1, 2, 3")] == [
        "1",
        "234",
        "1",
        "2",
        "3",
    ]
