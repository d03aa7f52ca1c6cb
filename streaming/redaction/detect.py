"""Finding what a policy redacts in a transcript's text.

SenseVoice's inverse text normalisation writes numbers as digits ("4111 1111 1111 1111",
"$42.50", "3:30 PM"), which is what makes rules reliable here. A run of digits is a
sequence of digit groups joined by single spaces, hyphens or dots ("4111-1111 1111"), or,
between groups of three or more, by ", " or a double space ("4111, 1111"). The
rules, by policy:

- `pci`: a run of 13 to 19 digits that passes the Luhn check; and, where the card is being
  talked about (a card word in this text: "card", "visa", "expiry", "security code", ...,
  or in the `context` before it with no digits after it, a question left open), any run
  of 3 or more digits (a card read in parts, a security code) and an expiry date
  (`05/27`, `05/2027`). Amounts ("$42.50"),
  percentages, times and dates with a month name are never a card's.
- `ssn`: `123-45-6789`, or 8 to 10 digits where a social security number is being talked
  about (9 read aloud, one of them perhaps dropped or doubled by the recogniser).
- `phone`: a run of 10 to 15 digits (an optional `+`), or 7 to 9 where a phone is talked
  about; never a run said of a card or a social security number (the last of the three
  named before it).
- `email`: a written address, or a spoken one ("jane dot doe at example dot com").
- `numbers`: any run of 4 or more digits.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from streaming.redaction.policies import PRIORITY, Policy

#: Digit groups joined by one separator: a number as ITN writes it, read in groups. ITN
#: also writes a pause between groups of three or more as ", " or a double space
#: ("4111, 1111"); a bare comma stays a thousands separator ("1,234" is two runs).
DIGIT_RUN = re.compile(r"\+?\d+(?:[ .-]\d+|(?<=\d{3})(?:, +| {2,})\d{3,})*")
CARD_WORDS = re.compile(
    r"\b(?:card|credit|debit|visa|mastercard|master card|amex|american express|discover|"
    r"cvv|cvc|cv2|security code|expir\w*|exp|valid thru)\b",
    re.IGNORECASE,
)
SSN_WORDS = re.compile(r"\b(?:social security|ssn|social)\b", re.IGNORECASE)
PHONE_WORDS = re.compile(r"\b(?:phone|call|mobile|cell|telephone|reach me)\b", re.I)
#: What a run of digits is said of, by the words before it.
TOPICS = {"card": CARD_WORDS, "ssn": SSN_WORDS, "phone": PHONE_WORDS}
#: Digits an SSN (9) read aloud may be written with.
SSN_DIGITS = range(8, 11)
EXPIRY = re.compile(r"\b(?:0?[1-9]|1[0-2])\s?/\s?(?:\d{2}|20\d{2})\b")
SSN_FORM = re.compile(r"\b\d{3}-\d{2}-\d{4}\b")
EMAIL_WRITTEN = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
EMAIL_SPOKEN = re.compile(
    r"\b[a-z0-9]+(?: (?:dot|underscore|dash) [a-z0-9]+)* at [a-z0-9-]+(?: dot [a-z]{2,})+\b",
    re.IGNORECASE,
)
#: A run that follows one of these, or is followed by one, is an amount, a time or a
#: percentage, never a card's.
AMOUNT_BEFORE = ("$", "€", "£", "¥")
AMOUNT_AFTER = ("%", ":")


@dataclass(frozen=True, slots=True)
class Found:
    """Characters `start:end` of the text are `policy`'s."""

    start: int
    end: int
    policy: Policy


def luhn_valid(digits: str) -> bool:
    """The Luhn check card numbers carry in their last digit."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def find(text: str, policies: frozenset[Policy], context: str = "") -> list[Found]:
    """What `policies` redact in `text`, overlaps merged (`disjoint`); `context` is the
    text said just before (a previous final), read for the words that say what is being
    talked about."""
    return disjoint([f for policy in policies for f in _rules(policy, text, context)])


def disjoint(found: Sequence[Found]) -> list[Found]:
    """Overlapping spans merged into one (the earlier policy in PRIORITY names it), in
    order: what any of them covers is redacted, none of it left between them."""
    rank = {p: i for i, p in enumerate(PRIORITY)}
    merged: list[Found] = []
    for f in sorted(found, key=lambda f: (f.start, -f.end)):
        if merged and f.start < merged[-1].end:
            top = merged[-1]
            policy = min(top.policy, f.policy, key=rank.__getitem__)
            merged[-1] = Found(top.start, max(top.end, f.end), policy)
        else:
            merged.append(f)
    return merged


def _rules(policy: Policy, text: str, context: str) -> Iterator[Found]:
    match policy:
        case Policy.PCI:
            yield from _cards(text, _talked_about(CARD_WORDS, text, context))
        case Policy.SSN:
            yield from _ssns(text, context)
        case Policy.PHONE:
            yield from _phones(text, context)
        case Policy.EMAIL:
            for pattern in (EMAIL_WRITTEN, EMAIL_SPOKEN):
                yield from (Found(m.start(), m.end(), policy) for m in pattern.finditer(text))
        case Policy.NUMBERS:
            for m in DIGIT_RUN.finditer(text):
                if digit_count(m.group()) >= 4:
                    yield Found(m.start(), m.end(), policy)


def _cards(text: str, talked_about: bool) -> Iterator[Found]:
    for m in DIGIT_RUN.finditer(text):
        if _amount(text, m.start(), m.end()):
            continue
        count = digit_count(m.group())
        digits = re.sub(r"\D", "", m.group())
        card = 13 <= count <= 19 and luhn_valid(digits)
        # Talking about a card, a run of 3+ digits is a part, a code or an expiry's year.
        if card or (talked_about and count >= 3):
            yield Found(m.start(), m.end(), Policy.PCI)
    if talked_about:
        for m in EXPIRY.finditer(text):
            yield Found(m.start(), m.end(), Policy.PCI)


def _ssns(text: str, context: str) -> Iterator[Found]:
    for m in SSN_FORM.finditer(text):
        yield Found(m.start(), m.end(), Policy.SSN)
    for m in DIGIT_RUN.finditer(text):
        if digit_count(m.group()) in SSN_DIGITS and _said_of("ssn", text, m.start(), context):
            yield Found(m.start(), m.end(), Policy.SSN)


def _phones(text: str, context: str) -> Iterator[Found]:
    for m in DIGIT_RUN.finditer(text):
        if _amount(text, m.start(), m.end()) or _topic(text, m.start()) in ("card", "ssn"):
            continue
        count = digit_count(m.group())
        if 10 <= count <= 15 or (7 <= count <= 9 and _said_of("phone", text, m.start(), context)):
            yield Found(m.start(), m.end(), Policy.PHONE)


def _topic(text: str, before: int) -> str | None:
    """Which of a card, a social security number or a phone was named last before
    character `before` of `text`, if any."""
    named = [
        (m.end(), kind) for kind, words in TOPICS.items() for m in words.finditer(text, 0, before)
    ]
    return max(named)[1] if named else None


def _said_of(kind: str, text: str, start: int, context: str) -> bool:
    """Whether the run at `start` is said of `kind`: the last thing named before it, or,
    with nothing named before it, named in the text or left open before it."""
    topic = _topic(text, start)
    if topic is not None:
        return topic == kind
    return _talked_about(TOPICS[kind], text, context)


def _talked_about(words: re.Pattern[str], text: str, context: str) -> bool:
    """Whether `text` names the thing, or the text before it left it open: named with no
    digits after ("What is your card number?"), so this text's digits answer it. Once
    the digits were said ("... the card are 4111."), the next text's are another's."""
    if words.search(text):
        return True
    named = list(words.finditer(context))
    return bool(named) and DIGIT_RUN.search(context, named[-1].end()) is None


def digit_count(run: str) -> int:
    return sum(ch.isdigit() for ch in run)


def _amount(text: str, start: int, end: int) -> bool:
    """Whether the run at `start:end` is money, a percentage or a time."""
    before = text[:start].rstrip()[-1:]
    after = text[end : end + 1]
    return before in AMOUNT_BEFORE or after in AMOUNT_AFTER
