"""Sentences that carry what redaction removes (issue 41), so the demo model can say them.

Card numbers (16 digits passing the Luhn check, read digit by digit, written in groups of
four), a card's halves, expiry dates ("05/27"), security codes, US phone numbers
("202-555-0119"), social security numbers ("123-45-6789") and e-mail addresses
("anna.smith@example.com", said "anna dot smith at example dot com"). The written forms
are those the redaction rules (streaming/redaction/detect.py) are built for; the base
tokenizer has no piece for some of their characters (`CHARACTERS`).

The redaction benchmark (tools/bench/redaction.py) draws its cases from here with a seed
training never uses, and keeps only held-out sentences; every card number is new anyway.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from streaming.redaction.detect import luhn_valid
from tools.demo_model import texts

#: Characters of these written forms that the base sentences never hold.
CHARACTERS = "@/-V"

KINDS = (
    "card", "card_half", "expiry", "code", "phone", "ssn", "email", "card_groups", "card_bare",
)  # fmt: skip
#: Kinds whose card is read in groups of four with a pause after each (as callers read
#: what is printed on the card): the synthesiser is given the commas.
GROUPED = frozenset({"card_groups", "card_bare"})

TEMPLATES: dict[str, tuple[str, ...]] = {
    "card": (
        "My card number is {card}.",
        "The card number is {card}.",
        "It is a Visa card, the number is {card}.",
        "The long number on my card is {card}.",
        "Card number {card}.",
        "I want to pay by card, the number is {card}.",
    ),
    "card_half": (
        "The first eight digits of the card are {half}.",
        "The card starts with {half}.",
        "The last eight digits of the card are {half}.",
    ),
    "expiry": (
        "The card expires on {expiry}.",
        "The expiry date is {expiry}.",
        "My card is valid until {expiry}.",
        "The card expires {expiry} and the security code is {code}.",
    ),
    "code": (
        "The security code is {code}.",
        "The three digit code on the back of the card is {code}.",
        "The CVV is {code}.",
    ),
    "phone": (
        "My phone number is {phone}.",
        "You can call me on {phone}.",
        "Call me back at {phone}.",
        "My mobile number is {phone}.",
        "Please call {phone} after {time}.",
    ),
    "ssn": (
        "My social security number is {ssn}.",
        "The social security number is {ssn}.",
        "My SSN is {ssn}.",
    ),
    "card_groups": (
        "My card number is {card}.",
        "The number on the card is {card}.",
        "OK, it is {card}.",
    ),
    # A bare utterance: the digits alone, as a caller says them after being asked.
    "card_bare": ("{card}",),
    "email": (
        "My email is {email}.",
        "My email address is {email}.",
        "Please send it to {email}.",
        "You can write to me at {email}.",
    ),
}

SURNAMES = ("smith", "jones", "brown", "taylor", "wilson", "clark", "walker", "hall", "young")
DOMAINS = ("example", "mail", "outlook", "company", "service", "office")
TOP_LEVEL = ("com", "org", "net")
CARD_PREFIXES = ("4", "51", "52", "53", "54", "55", "6011")


@dataclass(frozen=True, slots=True)
class PiiSentence:
    """A sentence of one kind, and the written values in it that redaction must remove
    (the first is the kind's own: an expiry's sentence may say a code too)."""

    kind: str
    sentence: texts.Sentence
    values: tuple[str, ...]


def luhn_complete(payload: str) -> str:
    """`payload` with the check digit that makes it pass the Luhn check."""
    return next(payload + d for d in "0123456789" if luhn_valid(payload + d))


def said_digits(digits: str, rng: random.Random) -> str:
    """Digits read one by one, a zero sometimes said "oh"."""
    return " ".join(
        ("oh" if rng.random() < 0.3 else "zero") if d == "0" else texts.words(int(d))
        for d in digits
    )


def _random_digits(rng: random.Random, count: int) -> str:
    return "".join(str(rng.randint(0, 9)) for _ in range(count))


def _card(rng: random.Random) -> texts.Fill:
    prefix = rng.choice(CARD_PREFIXES)
    digits = luhn_complete(prefix + _random_digits(rng, 15 - len(prefix)))
    groups = " ".join(digits[i : i + 4] for i in range(0, 16, 4))
    return groups, said_digits(digits, rng)


def _card_in_groups(rng: random.Random) -> texts.Fill:
    """A card number said in its four groups, with commas for the pauses."""
    written, _ = _card(rng)
    return written, ", ".join(said_digits(group, rng) for group in written.split())


def _half(rng: random.Random) -> texts.Fill:
    digits = _random_digits(rng, 8)
    return f"{digits[:4]} {digits[4:]}", said_digits(digits, rng)


def _expiry(rng: random.Random) -> texts.Fill:
    month, year = rng.randint(1, 12), rng.randint(26, 33)
    if month < 10:
        said_month = f"{rng.choice(('oh', 'zero'))} {texts.words(month)}"
    else:
        said_month = texts.words(month)
    slash = " slash " if rng.random() < 0.3 else " "
    return f"{month:02d}/{year}", f"{said_month}{slash}{texts.words(year)}"


def _code(rng: random.Random) -> texts.Fill:
    digits = _random_digits(rng, 3)
    return digits, said_digits(digits, rng)


def _phone(rng: random.Random) -> texts.Fill:
    area = str(rng.randint(201, 989))
    exchange = "555" if rng.random() < 0.4 else str(rng.randint(201, 999))
    digits = area + exchange + _random_digits(rng, 4)
    return f"{digits[:3]}-{digits[3:6]}-{digits[6:]}", said_digits(digits, rng)


def _ssn(rng: random.Random) -> texts.Fill:
    area = rng.choice([n for n in range(1, 900) if n != 666])
    digits = f"{area:03d}{rng.randint(1, 99):02d}{rng.randint(1, 9999):04d}"
    return f"{digits[:3]}-{digits[3:5]}-{digits[5:]}", said_digits(digits, rng)


def _email(rng: random.Random) -> texts.Fill:
    local = [texts.SLOTS["name"](rng)[1]]
    if rng.random() < 0.6:
        local.append(rng.choice(SURNAMES))
    host = [rng.choice(DOMAINS), rng.choice(TOP_LEVEL)]
    written = ".".join(local) + "@" + ".".join(host)
    return written, " dot ".join(local) + " at " + " dot ".join(host)


SLOTS: dict[str, texts.Slot] = {
    "card": _card,
    "half": _half,
    "expiry": _expiry,
    "code": _code,
    "phone": _phone,
    "ssn": _ssn,
    "email": _email,
    "time": texts.SLOTS["time"],
}
#: The slots whose values are not redaction's.
PLAIN_SLOTS = frozenset({"time"})


def pii_sentence(rng: random.Random, kind: str | None = None) -> PiiSentence:
    """A sentence of `kind` (or of a random kind) with its slots filled."""
    kind = kind or rng.choice(KINDS)
    template = rng.choice(TEMPLATES[kind])
    slots = {**SLOTS, "card": _card_in_groups} if kind in GROUPED else SLOTS
    fills = {name: slots[name](rng) for name in re.findall(r"{(\w+)}", template)}
    written = template.format(**{k: w for k, (w, _) in fills.items()})
    spoken = template.format(**{k: s for k, (_, s) in fills.items()})
    said = spoken if kind in GROUPED else ""
    values = tuple(w for name, (w, _) in fills.items() if name not in PLAIN_SLOTS)
    return PiiSentence(kind, texts.Sentence(written, texts.spoken_words(spoken), said), values)
