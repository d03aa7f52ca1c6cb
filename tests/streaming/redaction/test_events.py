"""A session's held finals in time: held while the speaker goes on, then for a bound."""

from __future__ import annotations

from dataclasses import replace

from engine.types import Token, Transcript
from streaming.events import Final
from streaming.redaction.events import HOLD_S, MAX_HOLD_S, EventRedactor
from streaming.redaction.policies import Policy, Redaction

PCI = Redaction(frozenset({Policy.PCI}))


def final(utt_id: int, text: str) -> Final:
    tokens = tuple(Token(i, f" {w}", i * 100, (i + 1) * 100) for i, w in enumerate(text.split()))
    return Final(utt_id, 0, 100, Transcript(text, "en", "neutral", "speech", True, text, tokens))


def test_held_finals_wait_while_the_next_utterance_is_open() -> None:
    redactor = EventRedactor(PCI)
    assert redactor.final(final(1, "My card number is 4111 1111"), now=10.0) == []
    # Speech goes on far past HOLD_S: the next part may be in it.
    for now in (11.0, 13.5, 16.0, 19.0):
        assert redactor.due(now, busy=True) == []
    # Quiet since 19.0: the wait runs from there.
    assert redactor.due(19.0 + HOLD_S - 0.1, busy=False) == []
    (out,) = redactor.due(19.0 + HOLD_S, busy=False)
    assert out.transcript.text == "My card number is [PCI]"


def test_held_finals_wait_no_longer_than_max_hold_after_the_last_came() -> None:
    redactor = EventRedactor(PCI)
    assert redactor.final(final(1, "The number is 4111 1111"), now=0.0) == []
    assert redactor.final(final(2, "1111"), now=5.0) == []  # a part: the wait restarts
    assert redactor.due(5.0 + MAX_HOLD_S - 0.1, busy=True) == []
    out = redactor.due(5.0 + MAX_HOLD_S, busy=True)
    assert [f.utt_id for f in out] == [1, 2] and not redactor.holding


def test_release_sends_every_held_final_in_order() -> None:
    redactor = EventRedactor(PCI)
    assert redactor.final(final(1, "My card number is 4111"), now=0.0) == []
    assert redactor.final(final(2, ""), now=1.0) == []
    assert redactor.final(final(3, "1111"), now=2.0) == []
    out = redactor.release()
    assert [(f.utt_id, f.transcript.text) for f in out] == [
        (1, "My card number is [PCI]"),
        (2, ""),
        (3, "[PCI]"),
    ]
    assert redactor.release() == [] and redactor.due(99.0, busy=False) == []


def test_rich_text_that_moved_the_text_about_keeps_no_digit_of_a_joined_card() -> None:
    # funasr's rendering can reorder the text (an event's emoji inside it): the card found
    # only by the join cannot be placed there, so every run of digits goes.
    redactor = EventRedactor(PCI)
    first = final(1, "The number is 5555 5555")
    first = replace(first, transcript=replace(first.transcript, rich_text="🎼The number 5555 5555"))
    assert redactor.final(first, now=0.0) == []
    out = redactor.final(final(2, "The rest is 5555 4444."), now=1.0)
    assert "5555" not in out[0].transcript.rich_text
