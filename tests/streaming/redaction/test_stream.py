"""A stream's redaction: cards read in two parts, partials, tokens and time spans."""

from __future__ import annotations

from engine.types import Token
from streaming.redaction.apply import REDACTED_ID
from streaming.redaction.policies import Policy, Redaction
from streaming.redaction.stream import MAX_HELD, FinalText, SpokenContext, StreamRedactor

PCI = Redaction(frozenset({Policy.PCI}))


def timed(text: str, start_ms: int = 0, step_ms: int = 100) -> tuple[Token, ...]:
    """One token a word, `step_ms` each, as SenseVoice's pieces start: with a space."""
    return tuple(
        Token(i, f" {word}", start_ms + i * step_ms, start_ms + (i + 1) * step_ms)
        for i, word in enumerate(text.split())
    )


def final(key: int, text: str) -> FinalText:
    return FinalText(key, text, timed(text), 0, 100 * len(text.split()))


def digits_in(texts: list[str]) -> str:
    return "".join(ch for text in texts for ch in text if ch.isdigit())


def test_a_card_read_in_two_utterances_is_caught_and_neither_part_is_shown() -> None:
    redactor = StreamRedactor(PCI)
    assert redactor.final(final(1, "The number is 4111 1111")) == []  # held: it may go on
    assert redactor.holding
    sent = redactor.final(final(2, "1111 1111."))
    assert [s.key for s in sent] == [1, 2]
    texts = [s.redacted.text for s in sent]
    assert texts == ["The number is [PCI]", "[PCI]."]
    assert digits_in(texts) == ""
    assert not redactor.holding


def test_a_card_whose_first_part_names_the_card_is_caught_in_its_second_part() -> None:
    # "My card number is 4111 1111" is redacted on its own (card words): the next part
    # has none and is only 8 digits, so only the join can tell it is the card's.
    redactor = StreamRedactor(PCI)
    assert redactor.final(final(1, "My card number is 4111 1111")) == []
    sent = redactor.final(final(2, "1111 1111."))
    assert [s.redacted.text for s in sent] == ["My card number is [PCI]", "[PCI]."]


def test_a_named_card_joins_its_next_part_even_with_a_digit_misheard() -> None:
    # 4111 1111 1111 1112 fails the Luhn check: what was said was a card all the same.
    redactor = StreamRedactor(PCI)
    assert redactor.final(final(1, "My card number is 4111 1111")) == []
    sent = redactor.final(final(2, "1111 1112."))
    assert digits_in([s.redacted.text for s in sent]) == ""


def test_a_second_part_said_after_words_is_caught_when_the_two_pass_luhn() -> None:
    redactor = StreamRedactor(PCI)
    assert redactor.final(final(1, "The first eight digits of the card are 5555 5555.")) == []
    sent = redactor.final(final(2, "The last eight are 5555 4444."))
    texts = [s.redacted.text for s in sent]
    assert texts == ["The first eight digits of the card are [PCI].", "The last eight are [PCI]."]


def test_after_a_named_card_other_numbers_are_left() -> None:
    redactor = StreamRedactor(PCI)
    assert redactor.final(final(1, "The last digits of the card are 4111.")) == []
    sent = redactor.final(final(2, "Your reference number is 97543."))  # held in its turn
    sent += redactor.release()
    texts = [s.redacted.text for s in sent]
    assert texts == ["The last digits of the card are [PCI].", "Your reference number is 97543."]


def test_a_held_final_that_was_no_card_is_sent_unchanged() -> None:
    redactor = StreamRedactor(PCI)
    assert redactor.final(final(1, "My order is 12345678")) == []
    sent = redactor.final(final(2, "Thank you."))
    assert [s.redacted.text for s in sent] == ["My order is 12345678", "Thank you."]


def test_a_held_final_is_released_when_no_next_part_comes() -> None:
    redactor = StreamRedactor(PCI)
    assert redactor.final(final(1, "It is 4111 1111")) == []
    (alone,) = redactor.release()
    assert alone.key == 1 and alone.redacted.text == "It is 4111 1111"
    assert redactor.release() == []


def test_without_pci_nothing_is_held() -> None:
    redactor = StreamRedactor(Redaction(frozenset({Policy.EMAIL})))
    (sent,) = redactor.final(final(1, "The number is 4111 1111"))
    assert sent.redacted.text == "The number is 4111 1111" and not redactor.holding


def test_card_words_in_an_earlier_final_count() -> None:
    redactor = StreamRedactor(PCI)
    (first,) = redactor.final(final(1, "Can I have your card number?"))
    assert first.redacted.spans == ()
    (second,) = redactor.final(final(2, "Sure, 5555 4444 ends it."))
    assert second.redacted.text == "Sure, [PCI] ends it."


def test_tokens_lose_the_redacted_text_and_spans_give_its_time() -> None:
    redactor = StreamRedactor(PCI)
    text = "My card is 4111 1111 1111 1111 thanks"
    (sent,) = redactor.final(FinalText(7, text, timed(text, start_ms=500), 500, 1300))
    redacted = sent.redacted
    assert redacted.text == "My card is [PCI] thanks"
    assert [t.text for t in redacted.tokens] == [
        " My",
        " card",
        " is",
        " [PCI]",
        "",
        "",
        "",
        " thanks",
    ]
    assert "".join(t.text for t in redacted.tokens).strip() == redacted.text
    (span,) = redacted.spans
    assert (span.policy, span.start_ms, span.end_ms) == (Policy.PCI, 800, 1200)
    assert span.to_dict() == {"policy": "pci", "start_ms": 800, "end_ms": 1200}


def test_tokens_that_do_not_spell_the_text_give_the_whole_utterance() -> None:
    redactor = StreamRedactor(PCI)
    text = "My card is 4111 1111 1111 1111"
    odd = (Token(1, " something", 0, 100), Token(2, " 4111 11", 100, 200))
    (sent,) = redactor.final(FinalText(1, text, odd, 2000, 4000))
    assert [(s.start_ms, s.end_ms) for s in sent.redacted.spans] == [(2000, 4000)]
    # No telling where the card is among them: no token keeps a digit.
    assert [t.text for t in sent.redacted.tokens] == [" something", " [PCI]"]


def test_a_partial_shows_no_digits_its_final_might_redact() -> None:
    redactor = StreamRedactor(PCI)
    assert redactor.partial("my card is 4111 11") == "my card is [PCI]"
    assert redactor.partial("the number is 4111") == "the number is [PCI]"  # may grow
    assert redactor.partial("it costs $40 and 12 more") == "it costs $40 and [PCI] more"
    # A card one digit off the Luhn check, as a partial may decode it, is hidden too.
    assert redactor.partial("4111 1111 1111 1112 then") == "[PCI] then"
    # After a held final, the partial's first digits may finish its card.
    assert redactor.final(final(1, "It is 4111 1111")) == []
    assert redactor.partial("1111 1111 and then") == "[PCI] and then"


def test_a_partial_without_digit_policies_is_untouched_but_for_what_they_find() -> None:
    redactor = StreamRedactor(Redaction(frozenset({Policy.EMAIL}), mask=True))
    assert redactor.partial("mail a@b.com about 4111") == "mail *@*.*** about 4111"


def test_a_card_read_in_four_parts_is_held_until_it_is_whole() -> None:
    redactor = StreamRedactor(PCI)
    assert redactor.final(final(1, "My card number is 4111")) == []
    assert redactor.final(final(2, "1111")) == []
    assert redactor.final(final(3, "1111,")) == []
    sent = redactor.final(final(4, "1111. Thanks."))
    assert [s.key for s in sent] == [1, 2, 3, 4]
    texts = [s.redacted.text for s in sent]
    assert texts == ["My card number is [PCI]", "[PCI]", "[PCI],", "[PCI]. Thanks."]
    assert not redactor.holding


def test_an_unnamed_card_in_four_parts_is_caught_by_its_luhn_check() -> None:
    redactor = StreamRedactor(PCI)
    for key, text in enumerate(["It is 5555", "5555", "5555"]):
        assert redactor.final(final(key, text)) == []
    sent = redactor.final(final(3, "4444."))
    assert digits_in([s.redacted.text for s in sent]) == ""


def test_an_empty_final_between_two_parts_neither_releases_nor_breaks_them() -> None:
    redactor = StreamRedactor(PCI)
    assert redactor.final(final(1, "My card number is 4111 1111")) == []
    assert redactor.final(FinalText(2, "", (), 0, 0)) == []  # a cough
    assert redactor.final(final(3, ".")) == []  # a segment with nothing in it
    sent = redactor.final(final(4, "1111 1111."))
    assert [(s.key, s.redacted.text) for s in sent] == [
        (1, "My card number is [PCI]"),
        (2, ""),
        (3, "."),
        (4, "[PCI]."),
    ]


def test_the_parts_of_a_named_card_that_never_completes_are_redacted_all_the_same() -> None:
    redactor = StreamRedactor(PCI)
    assert redactor.final(final(1, "My card number is 4111")) == []
    assert redactor.final(final(2, "1111")) == []
    sent = redactor.final(final(3, "Sorry, let me find it."))
    assert [s.redacted.text for s in sent] == [
        "My card number is [PCI]",
        "[PCI]",
        "Sorry, let me find it.",
    ]
    assert redactor.final(final(4, "My card number is 4111")) == []
    assert redactor.final(final(5, "1111")) == []
    assert [s.redacted.text for s in redactor.release()] == ["My card number is [PCI]", "[PCI]"]


def test_digits_that_grow_past_any_card_are_sent_as_said() -> None:
    redactor = StreamRedactor(PCI)
    assert redactor.final(final(1, "The order is 1234 5678")) == []
    assert redactor.final(final(2, "1234 5678")) == []
    sent = redactor.final(final(3, "1234 5678"))  # 24 digits: no card's
    sent += redactor.release()
    texts = [s.redacted.text for s in sent]
    assert texts == ["The order is 1234 5678", "1234 5678", "1234 5678"]


def test_no_more_than_max_held_finals_wait() -> None:
    redactor = StreamRedactor(PCI)
    assert redactor.final(final(0, "My card number is 4111")) == []
    for key in range(1, MAX_HELD):
        assert redactor.final(FinalText(key, "", (), 0, 0)) == []
    sent = redactor.final(FinalText(MAX_HELD, "", (), 0, 0))
    assert [s.key for s in sent] == list(range(MAX_HELD + 1)) and not redactor.holding


def test_groups_written_with_commas_or_double_spaces_are_one_card() -> None:
    redactor = StreamRedactor(PCI)
    for text in ("Take 4111, 1111, 1111, 1111 then", "Take 4111  1111  1111  1111 then"):
        (sent,) = redactor.final(final(1, text))
        assert sent.redacted.text == "Take [PCI] then"


def test_what_one_channel_asked_counts_for_the_other() -> None:
    spoken = SpokenContext()
    agent, customer = StreamRedactor(PCI, spoken), StreamRedactor(PCI, spoken)
    (asked,) = agent.final(final(1, "What is the security code?"))
    assert asked.redacted.spans == ()
    (answered,) = customer.final(final(1, "It is 123.")) + customer.release()
    assert answered.redacted.text == "It is [PCI]."
    # Each channel keeps its own: a stream of its own would not have heard the question.
    (alone,) = StreamRedactor(PCI).final(final(1, "It is 123."))
    assert alone.redacted.text == "It is 123."


def test_a_part_named_by_the_other_channel_stays_redacted_when_the_context_moves_on() -> None:
    spoken = SpokenContext()
    agent, customer = StreamRedactor(PCI, spoken), StreamRedactor(PCI, spoken)
    agent.final(final(1, "What is your card number?"))
    assert customer.final(final(1, "4111 1111")) == []  # named by the question: held
    agent.final(final(2, "Okay."))
    agent.final(final(3, "Go on."))  # the question has left the shared context
    (released,) = customer.release()
    assert released.redacted.text == "[PCI]"
    assert all(t.id == REDACTED_ID for t in released.redacted.tokens)


def test_a_named_cards_part_after_words_joins_by_its_length_with_a_digit_misheard() -> None:
    redactor = StreamRedactor(PCI)
    assert redactor.final(final(1, "My card number is 4111 1111")) == []
    sent = redactor.final(final(2, "and then 1111 1112."))  # fails the Luhn check
    assert [s.redacted.text for s in sent] == ["My card number is [PCI]", "and then [PCI]."]


def test_a_number_after_a_named_cards_part_is_no_part_of_it_by_length_alone() -> None:
    # As the demo model writes a card's last digits, then a reference number: 13 digits
    # together, a card's length, but not a usual one, and no Luhn-valid number.
    redactor = StreamRedactor(PCI)
    assert redactor.final(final(1, "The last digits of the card are 41111111.")) == []
    sent = redactor.final(final(2, "Your reference number is 97543.")) + redactor.release()
    assert [s.redacted.text for s in sent] == [
        "The last digits of the card are [PCI].",
        "Your reference number is 97543.",
    ]
