"""Redactions applied to a final's text and timed tokens: no redacted value survives in a
token's text or its id (the tokenizer is public: an id is the piece it spells)."""

from __future__ import annotations

from dataclasses import replace

from engine.types import Token
from streaming.redaction.apply import REDACTED_ID, redact
from streaming.redaction.detect import Found
from streaming.redaction.policies import Policy

#: SentencePiece-like pieces of "My card number is 4111 1111 1111 1111." (the demo model
#: splits a card so), with made-up ids: each piece's id stands for its text.
PIECES = (" My", " card", " number", " is", " 4", "1", "1", "1", *[" 11", "1", "1"] * 3, ".")
IDS = {piece: 100 + i for i, piece in enumerate(dict.fromkeys(PIECES))}
CARD_AT = (18, 37)  # "4111 1111 1111 1111" in the text


def tokens_of(pieces: tuple[str, ...]) -> tuple[Token, ...]:
    return tuple(Token(IDS.get(p, 999), p, i * 100, (i + 1) * 100) for i, p in enumerate(pieces))


def test_a_covered_tokens_text_and_id_are_gone_and_the_others_kept() -> None:
    tokens = tokens_of(PIECES)
    text = "".join(PIECES).strip()
    assert text[slice(*CARD_AT)] == "4111 1111 1111 1111"
    out = redact(text, tokens, [Found(*CARD_AT, Policy.PCI)], False, (0, 1700))
    assert out.text == "My card number is [PCI]."
    assert [t.text for t in out.tokens] == [" My", " card", " number", " is", " [PCI]"] + [
        ""
    ] * 12 + ["."]
    covered = out.tokens[4:-1]
    assert all(t.id == REDACTED_ID for t in covered), covered
    assert [t.id for t in out.tokens[:4]] == [IDS[p] for p in PIECES[:4]]
    assert out.tokens[-1].id == IDS["."]
    assert [(t.start_ms, t.end_ms) for t in out.tokens] == [(t.start_ms, t.end_ms) for t in tokens]
    assert REDACTED_ID < 0  # no piece's id: a renderer of ids drops it


def test_a_masked_card_keeps_no_id_either() -> None:
    tokens = tokens_of(PIECES)
    text = "".join(PIECES).strip()
    out = redact(text, tokens, [Found(*CARD_AT, Policy.PCI)], True, (0, 1700))
    assert out.text == "My card number is **** **** **** ****."
    assert all(t.id == REDACTED_ID for t in out.tokens[4:-1])
    assert not any(ch.isdigit() for t in out.tokens for ch in t.text)


def test_a_token_only_partly_covered_loses_its_id() -> None:
    pieces = (" Card", " 4111", "1111", "1111", "1111.")  # the last piece ends past the card
    tokens = tokens_of(pieces)
    out = redact("Card 4111111111111111.", tokens, [Found(5, 21, Policy.PCI)], False, (0, 500))
    assert [t.text for t in out.tokens] == [" Card", " [PCI]", "", "", ""]
    assert [t.id for t in out.tokens[1:]] == [REDACTED_ID] * 4


def test_tokens_that_do_not_spell_the_text_lose_every_digit_and_its_id() -> None:
    # An unknown piece decodes to " ⁇ ", not to its own text: no telling where the card is.
    pieces = (" <unk>", " card", " 4", "1", "1", "1", *[" 11", "1", "1"] * 3)
    tokens = tokens_of(pieces)
    text = "⁇ card 4111 1111 1111 1111"
    out = redact(text, tokens, [Found(7, 26, Policy.PCI)], False, (0, 1600))
    assert out.text == "⁇ card [PCI]"
    assert not any(ch.isdigit() for t in out.tokens for ch in t.text), out.tokens
    assert all(t.id == REDACTED_ID for t in out.tokens[2:])
    assert [t.id for t in out.tokens[:2]] == [999, IDS[" card"]]
    assert out.spans[0].start_ms == 0 and out.spans[0].end_ms == 1600  # the whole utterance


def test_tokens_that_do_not_spell_the_text_lose_an_email_address_letters_too() -> None:
    pieces = (" write", " to", " <unk>", " john", "@", "example", ".", "com")
    tokens = tokens_of(pieces)
    text = "write to ⁇ john@example.com"
    found = [Found(11, 27, Policy.EMAIL)]
    assert text[11:27] == "john@example.com"
    out = redact(text, tokens, found, False, (0, 800))
    assert out.text == "write to ⁇ [EMAIL]"
    kept = [(t.text, t.id) for t in out.tokens if t.id != REDACTED_ID]
    assert kept == [(" write", 999), (" to", 999), (" <unk>", 999), (".", IDS["."])]
    assert not any(word in t.text for t in out.tokens for word in ("john", "example", "com", "@"))


def test_nothing_found_leaves_the_tokens_as_they_were() -> None:
    tokens = tokens_of(PIECES)
    text = "".join(PIECES).strip()
    assert redact(text, tokens, [], False, (0, 1700)).tokens == tokens


def test_nothing_found_in_tokens_that_do_not_spell_the_text_leaves_them_too() -> None:
    # Every final is redacted, most with nothing found: this one must not fail on digits.
    tokens = tokens_of((" <unk>", " 97", "543"))
    assert redact("⁇ 97543", tokens, [], False, (0, 300)).tokens == tokens


def test_a_redacted_token_keeps_no_log_probability_and_the_others_keep_theirs() -> None:
    # A value's token scores would tell a reader how sure the model was of the digits.
    tokens = tuple(replace(t, logprob=-0.1 * (i + 1)) for i, t in enumerate(tokens_of(PIECES)))
    text = "".join(PIECES).strip()
    out = redact(text, tokens, [Found(*CARD_AT, Policy.PCI)], False, (0, 1700))
    assert all(t.logprob is None for t in out.tokens if t.id == REDACTED_ID)
    kept = [t.logprob for t in out.tokens if t.id != REDACTED_ID]
    assert kept == [t.logprob for t in (*tokens[:4], tokens[-1])]
