"""One stream's redaction: finals read with the ones before them, partials kept safe.

A card is often read in parts, one utterance each ("my card is 4111 1111", "1111 1111").
So, with `pci`, a final that ends in digits that could begin a card is held until the
next final: when that one begins with digits and the two parts make a Luhn-valid number,
both parts are redacted; a next final that begins with words joins by its first run
("the last eight are 5555 4444"). When the first part was said as a card's (card words:
pci took it already), the Luhn check is not asked of a leading run: a digit misheard
must not let the second part through. The caller sends what `final` returns, and calls
`release` when no next final is coming soon (its deadline, or the stream's end): nothing
is lost, a held final is only late. Card words in the finals before a text count for it
too ("the card number is?" in one utterance, the digits in the next), when they left the
question open.

A partial never shows digits its final might redact: it is redacted by the same rules,
and, while any digit policy is on, so is every run of 4 or more digits in it (the final
may decode them otherwise), its last run (it may still grow into a number) and, after a
held final, its first (it may finish the held one's card).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from engine.types import Token
from streaming.redaction.apply import Redacted, redact, redact_text
from streaming.redaction.detect import DIGIT_RUN, Found, digit_count, disjoint, find, luhn_valid
from streaming.redaction.policies import PRIORITY, Policy, Redaction

#: How many earlier finals are read for what is being talked about.
CONTEXT_FINALS = 2
#: A card has 13 to 19 digits: a final ending in fewer may be its first part.
CARD_DIGITS = range(13, 20)
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


class StreamRedactor:
    """The redaction of one stream's finals and partials, in order."""

    def __init__(self, redaction: Redaction) -> None:
        self.redaction = redaction
        self._before: deque[str] = deque(maxlen=CONTEXT_FINALS)
        self._held: FinalText | None = None
        self._held_named = False  # the held final's last run was pci's already

    @property
    def holding(self) -> bool:
        """Whether a final waits for the next one (the caller's deadline runs)."""
        return self._held is not None

    def final(self, item: FinalText) -> list[RedactedFinal]:
        """The finals that may be sent now, in order (none, while this one is held)."""
        out: list[RedactedFinal] = []
        extra: list[Found] = []
        if self._held is not None:
            held_part, this_part = _joined_card(self._held.text, item.text, self._held_named)
            out.append(self._decide(self._held, [held_part] if held_part else []))
            self._held = None
            extra = [this_part] if this_part else []
        begins = self._may_begin_card(item.text, extra)
        if begins is not None:
            self._held, self._held_named = item, begins
            return out
        out.append(self._decide(item, extra))
        return out

    def release(self) -> list[RedactedFinal]:
        """The held final, decided alone (no next part came in time)."""
        held, self._held = self._held, None
        return [] if held is None else [self._decide(held, [])]

    def partial(self, text: str) -> str:
        """A partial's text, redacted at least as much as its final will be."""
        policies = self.redaction.policies
        found = find(text, policies, self._context())
        guard = next((p for p in PRIORITY if p in policies and p in DIGIT_POLICIES), None)
        if guard is not None:
            runs = list(DIGIT_RUN.finditer(text))
            # A partial's digits may be decoded otherwise in the final (a card that fails
            # the Luhn check here, by one digit): any run of 4 or more is hidden, and the
            # last (it may still grow), and after a held final the first.
            unsure = [m for m in runs if digit_count(m.group()) >= 4] + runs[-1:]
            unsure += runs[:1] if self._held is not None else []
            found += [Found(m.start(), m.end(), guard) for m in unsure]
        return redact_text(text, disjoint(found), self.redaction.mask)

    def _decide(self, item: FinalText, extra: Sequence[Found]) -> RedactedFinal:
        found = disjoint([*extra, *find(item.text, self.redaction.policies, self._context())])
        self._before.append(item.text)
        span = (item.start_ms, item.end_ms)
        return RedactedFinal(
            item.key, redact(item.text, item.tokens, found, self.redaction.mask, span)
        )

    def _context(self) -> str:
        return " ".join(self._before)

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
        found = find(text, self.redaction.policies, self._context())
        takers = {f.policy for f in found if _covers(f, last)}
        if not takers and 4 <= count < CARD_DIGITS.stop - 1:
            return False
        if takers == {Policy.PCI} and count < CARD_DIGITS.start:  # a named card's start
            return True
        return None


def _joined_card(first: str, second: str, named: bool) -> tuple[Found | None, Found | None]:
    """The end of `first` and a run of `second` when, together, they are a card: its
    leading run (Luhn-valid, or of a card's length when `first` named the card), or its
    first run after words ("the last eight are ...") when the two pass the Luhn check."""
    last = _last_run(first)
    if last is None:
        return None, None
    shift = len(second) - len(second.lstrip())
    lead = DIGIT_RUN.match(second, shift)
    later = DIGIT_RUN.search(second)
    for run, lenient in ((lead, named), (later if lead is None else None, False)):
        if run is None:
            continue
        digits = re.sub(r"\D", "", last.group() + run.group())
        if len(digits) in CARD_DIGITS and (lenient or luhn_valid(digits)):
            return (
                Found(last.start(), last.end(), Policy.PCI),
                Found(run.start(), run.end(), Policy.PCI),
            )
    return None, None


def _covers(found: Found, run: re.Match[str]) -> bool:
    return found.start <= run.start() and found.end >= run.end()


def _last_run(text: str) -> re.Match[str] | None:
    """The digit run `text` ends with (trailing punctuation aside), if any."""
    body = text.rstrip(TRAILING_PUNCTUATION)
    runs = [m for m in DIGIT_RUN.finditer(body) if m.end() == len(body)]
    return runs[-1] if runs else None
