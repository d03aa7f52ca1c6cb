"""One stream's redaction: finals read with the ones before them, partials kept safe.

A card is often read in parts, one utterance each ("my card is 4111 1111", "1111",
"1111 1111"). So, with `pci`, a final that ends in digits that could begin a card is held,
and so are the finals after it that are only digits (more parts) or nothing at all (a
cough, a discarded segment), until the digits make a card or a final shows they do not.
A card is made when the held digits and the next final's leading run are a Luhn-valid
number, or a card's length when the first part was said as a card's (card words: pci took
it already: a digit misheard must not let the rest through); a final that begins with
words joins by its first run ("the last eight are 5555 4444") when the parts pass the Luhn
check. Every part of a card is redacted; when a named card's parts never complete, each
part is redacted all the same. The caller sends what `final` returns, and calls `release`
when no next part is coming (its deadline, or the stream's end): nothing is lost, a held
final is only late.

What was said just before (`SpokenContext`, shared by the channels of one stream: the
agent asks for the security code on one, the customer answers on the other) counts for
what a number is said of, when it left the question open.

A partial never shows digits its final might redact: it is redacted by the same rules,
and, while any digit policy is on, so is every run of 4 or more digits in it (the final
may decode them otherwise), its last run (it may still grow into a number) and, while
finals are held, its first (it may finish their card).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.types import Token
from streaming.redaction.apply import Redacted, redact, redact_text
from streaming.redaction.detect import DIGIT_RUN, Found, digit_count, disjoint, find, luhn_valid
from streaming.redaction.policies import PRIORITY, Policy, Redaction

#: How many earlier finals are read for what is being talked about.
CONTEXT_FINALS = 2
#: A card has 13 to 19 digits: a final ending in fewer may be its first part.
CARD_DIGITS = range(13, 20)
#: The lengths most cards have (American Express, then Visa, Mastercard and most others).
USUAL_CARD_DIGITS = (15, 16)
#: The most finals held at once (parts, and the empty finals between them).
MAX_HELD = 8
DIGIT_POLICIES = frozenset({Policy.PCI, Policy.SSN, Policy.PHONE, Policy.NUMBERS})
TRAILING_PUNCTUATION = ".,;:!? "


@dataclass(frozen=True, slots=True)
class FinalText:
    """A final's text and timed tokens; `key` is the caller's (its utterance id)."""

    key: int
    text: str
    tokens: tuple[Token, ...]
    start_ms: int
    end_ms: int


@dataclass(frozen=True, slots=True)
class RedactedFinal:
    key: int
    redacted: Redacted


class SpokenContext:
    """The last few finals' texts of a stream, on any of its channels, oldest first."""

    def __init__(self, finals: int = CONTEXT_FINALS) -> None:
        self._texts: deque[str] = deque(maxlen=finals)

    def add(self, text: str) -> None:
        if not _blank(text):  # a cough must not push out the question it interrupted
            self._texts.append(text)

    def text(self) -> str:
        return " ".join(self._texts)


@dataclass(slots=True)
class _Held:
    """Finals held for a card: the first ends in digits, the rest are digits or empty."""

    finals: list[FinalText] = field(default_factory=list)
    named: bool = False  # the first part's run was pci's already

    def runs(self) -> list[re.Match[str] | None]:
        """Each held final's part of the card: the first's last run, the others' whole."""
        return [_last_run(self.finals[0].text), *(_only_digits(f.text) for f in self.finals[1:])]

    def digits(self) -> str:
        return "".join(re.sub(r"\D", "", run.group()) for run in self.runs() if run is not None)


class StreamRedactor:
    """The redaction of one stream's finals and partials, in order."""

    def __init__(self, redaction: Redaction, context: SpokenContext | None = None) -> None:
        self.redaction = redaction
        self._context = context if context is not None else SpokenContext()
        self._held: _Held | None = None

    @property
    def holding(self) -> bool:
        """Whether finals wait for the next one (the caller's deadline runs)."""
        return self._held is not None

    def final(self, item: FinalText) -> list[RedactedFinal]:
        """The finals that may be sent now, in order (none, while this one is held)."""
        held = self._held
        if held is None:
            return self._begin(item, [])
        if len(held.finals) < MAX_HELD and self._goes_on(held, item.text):
            held.finals.append(item)  # a cough between two parts, or another part
            return []
        run = _joining_run(held, item.text)
        if run is None:  # no card: the held finals alone, then this one afresh
            return [*self.release(), *self._begin(item, [])]
        self._held = None
        out = [self._decide(f, _part(r)) for f, r in zip(held.finals, held.runs(), strict=True)]
        return out + self._begin(item, _part(run))

    def release(self) -> list[RedactedFinal]:
        """The held finals, decided alone (no next part came in time). Every part of a
        named card is redacted all the same, its first too: the words that named it may
        have left the context since (another channel spoke)."""
        held, self._held = self._held, None
        if held is None:
            return []
        runs = held.runs()
        return [
            self._decide(f, _part(run) if held.named else [])
            for f, run in zip(held.finals, runs, strict=True)
        ]

    def partial(self, text: str) -> str:
        """A partial's text, redacted at least as much as its final will be."""
        policies = self.redaction.policies
        found = find(text, policies, self._context.text())
        guard = next((p for p in PRIORITY if p in policies and p in DIGIT_POLICIES), None)
        if guard is not None:
            runs = list(DIGIT_RUN.finditer(text))
            # A partial's digits may be decoded otherwise in the final (a card that fails
            # the Luhn check here, by one digit): any run of 4 or more is hidden, and the
            # last (it may still grow), and while finals are held the first.
            unsure = [m for m in runs if digit_count(m.group()) >= 4] + runs[-1:]
            unsure += runs[:1] if self._held is not None else []
            found += [Found(m.start(), m.end(), guard) for m in unsure]
        return redact_text(text, disjoint(found), self.redaction.mask)

    @staticmethod
    def _goes_on(held: _Held, text: str) -> bool:
        """Whether `text` says nothing, or only digits that may still grow into the held
        card without being one yet."""
        if _blank(text):
            return True
        whole = _only_digits(text)
        if whole is None:
            return False
        digits = held.digits() + re.sub(r"\D", "", whole.group())
        return not _card(digits, held.named) and len(digits) < CARD_DIGITS.stop - 1

    def _begin(self, item: FinalText, extra: Sequence[Found]) -> list[RedactedFinal]:
        """`item` held as a card's possible first part, or decided now."""
        named = self._may_begin_card(item.text, extra)
        if named is None:
            return [self._decide(item, extra)]
        self._held = _Held([item], named)
        return []

    def _decide(self, item: FinalText, extra: Sequence[Found]) -> RedactedFinal:
        found = disjoint([*extra, *find(item.text, self.redaction.policies, self._context.text())])
        self._context.add(item.text)
        span = (item.start_ms, item.end_ms)
        return RedactedFinal(
            item.key, redact(item.text, item.tokens, found, self.redaction.mask, span)
        )

    def _may_begin_card(self, text: str, extra: Sequence[Found]) -> bool | None:
        """None unless `text` ends in digits that could be a card's first part and that
        no rule but pci's redacts (pci's must still see the next part); else whether
        pci took them (the card was named)."""
        if Policy.PCI not in self.redaction.policies:
            return None
        last = _last_run(text)
        if last is None or any(_covers(f, last) for f in extra):  # it ends a joined card
            return None
        count = digit_count(last.group())
        found = find(text, self.redaction.policies, self._context.text())
        takers = {f.policy for f in found if _covers(f, last)}
        if not takers and 4 <= count < CARD_DIGITS.stop - 1:
            return False
        if takers == {Policy.PCI} and count < CARD_DIGITS.start:  # a named card's start
            return True
        return None


def _card(digits: str, lenient: bool) -> bool:
    """Whether these digits are a card: Luhn-valid, or of a card's length if `lenient`."""
    return len(digits) in CARD_DIGITS and (lenient or luhn_valid(digits))


def _joining_run(held: _Held, second: str) -> re.Match[str] | None:
    """The run of `second` that completes the held card: its leading run, or its first run
    after words ("the last eight are ..."), when together they are Luhn-valid, or of a
    card's length when the card was named (after words: of a usual card's, 15 or 16)."""
    shift = len(second) - len(second.lstrip())
    lead = DIGIT_RUN.match(second, shift)
    later = DIGIT_RUN.search(second) if lead is None else None
    before = held.digits()
    if lead is not None:
        return lead if _card(before + _digits(lead), held.named) else None
    if later is None:
        return None
    # A named card's part after words joins by a usual card's length too ("... and then
    # 1111 1112", a digit misheard), never by any length: "... the card are 41111111.",
    # then "Your reference number is 97543." are 13 digits, and no card.
    joined = before + _digits(later)
    usual = held.named and len(joined) in USUAL_CARD_DIGITS
    return later if _card(joined, usual) else None


def _digits(run: re.Match[str]) -> str:
    return re.sub(r"\D", "", run.group())


def _part(run: re.Match[str] | None) -> list[Found]:
    return [] if run is None else [Found(run.start(), run.end(), Policy.PCI)]


def _blank(text: str) -> bool:
    """Whether a final says nothing (a cough, a discarded segment)."""
    return not text.strip(TRAILING_PUNCTUATION + " \t\n")


def _only_digits(text: str) -> re.Match[str] | None:
    """The run that is all `text` says (punctuation aside), if it is only digits."""
    body = text.rstrip(TRAILING_PUNCTUATION)
    shift = len(body) - len(body.lstrip())
    return DIGIT_RUN.fullmatch(body, shift)


def _covers(found: Found, run: re.Match[str]) -> bool:
    return found.start <= run.start() and found.end >= run.end()


def _last_run(text: str) -> re.Match[str] | None:
    """The digit run `text` ends with (trailing punctuation aside), if any."""
    body = text.rstrip(TRAILING_PUNCTUATION)
    runs = [m for m in DIGIT_RUN.finditer(body) if m.end() == len(body)]
    return runs[-1] if runs else None
