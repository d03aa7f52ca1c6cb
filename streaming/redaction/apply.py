"""Applying what was found: the text and its timed tokens redacted, and where in time.

A transcript's text is its tokens' texts joined and stripped (engine.decoding.transcript),
so a character span of the text is a run of tokens, and their times are the span's: a
recorder can bleep that audio. A token any part of which is redacted loses its text: the
first of a span's tokens carries the placeholder (or its mask), the others are emptied.
It loses its id too (`REDACTED_ID`): the tokenizer is public, so an id is its piece.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from engine.types import Token
from streaming.redaction.detect import Found
from streaming.redaction.policies import Policy

#: What a mask keeps: the spaces and separators, so its shape still reads as a number.
MASK_KEEPS = frozenset(" -./@+")
#: The id of a token whose text was redacted: no piece's (a piece's id spells its text,
#: and the tokenizer is public), so a renderer of token ids leaves it out.
REDACTED_ID = -1


@dataclass(frozen=True, slots=True)
class Span:
    """One redaction: its policy, and its time on the utterance's clock (ms)."""

    policy: Policy
    start_ms: int
    end_ms: int

    def to_dict(self) -> dict[str, object]:
        return {"policy": self.policy.value, "start_ms": self.start_ms, "end_ms": self.end_ms}


@dataclass(frozen=True, slots=True)
class Redacted:
    """A text with its redactions applied, its tokens likewise, and their spans."""

    text: str
    tokens: tuple[Token, ...]
    spans: tuple[Span, ...]


def replacement(original: str, policy: Policy, mask: bool) -> str:
    """The placeholder, or a mask of the same length."""
    if not mask:
        return policy.placeholder
    return "".join(ch if ch in MASK_KEEPS else "*" for ch in original)


def redact_text(text: str, found: Sequence[Found], mask: bool) -> str:
    """`text` with every found span replaced (spans must not overlap)."""
    out, at = [], 0
    for f in sorted(found, key=lambda f: f.start):
        out += [text[at : f.start], replacement(text[f.start : f.end], f.policy, mask)]
        at = f.end
    out.append(text[at:])
    return "".join(out)


def redact(
    text: str,
    tokens: Sequence[Token],
    found: Sequence[Found],
    mask: bool,
    utterance_ms: tuple[int, int],
) -> Redacted:
    """The text, its tokens and the redactions' time spans. Tokens that do not spell the
    text (which the decoder's pieces always do, but for an unknown or byte-level piece)
    are scrubbed of every digit and '@' and of any piece of what was found, and the spans
    take the utterance's whole time: bleep and hide too much, never less."""
    if not found:
        return Redacted(text, tuple(tokens), ())
    offsets = _token_offsets(text, tokens)
    if offsets is None:  # no telling which tokens hold what was found: scrub them all
        hidden = [text[f.start : f.end] for f in found]
        return Redacted(
            redact_text(text, found, mask),
            tuple(_scrubbed(t, hidden, found[0].policy, mask) for t in tokens),
            tuple(Span(f.policy, *utterance_ms) for f in found),
        )
    new_tokens = list(tokens)
    spans = []
    for f in found:
        covered = [i for i, (a, b) in enumerate(offsets) if a < f.end and b > f.start]
        if not covered:
            spans.append(Span(f.policy, *utterance_ms))
            continue
        spans.append(Span(f.policy, tokens[covered[0]].start_ms, tokens[covered[-1]].end_ms))
        lead = " " if tokens[covered[0]].text.startswith(" ") else ""
        shown = replacement(text[f.start : f.end], f.policy, mask)
        new_tokens[covered[0]] = _hidden(tokens[covered[0]], lead + shown)
        for i in covered[1:]:
            new_tokens[i] = _hidden(tokens[i], "")
    return Redacted(redact_text(text, found, mask), tuple(new_tokens), tuple(spans))


def _scrubbed(token: Token, hidden: Sequence[str], policy: Policy, mask: bool) -> Token:
    """A token whose place in the text is unknown, with no digit or '@' left in it, nor
    letters that may be part of a `hidden` value (an e-mail address's name)."""
    body = token.text.strip()
    spelled = any(ch.isalnum() for ch in body) and any(body in h for h in hidden)
    if not spelled and not any(ch.isdigit() or ch == "@" for ch in body):
        return token
    lead = " " if token.text.startswith(" ") else ""
    return _hidden(token, lead + replacement(body, policy, mask))


def _token_offsets(text: str, tokens: Sequence[Token]) -> list[tuple[int, int]] | None:
    """Each token's character span in `text`, or None when they do not spell it."""
    joined = "".join(t.text for t in tokens)
    lead = len(joined) - len(joined.lstrip())
    if joined.strip() != text:
        return None
    offsets, at = [], -lead
    for t in tokens:
        offsets.append((max(0, at), max(0, at + len(t.text))))
        at += len(t.text)
    return offsets


def _hidden(token: Token, text: str) -> Token:
    """A token that shows `text` in place of what it said: no id and no log-probability,
    either of which would tell what was redacted."""
    return replace(token, id=REDACTED_ID, text=text, logprob=None)
