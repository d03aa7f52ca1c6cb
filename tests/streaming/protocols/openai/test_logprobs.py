"""OpenAI `logprobs` lists: one `{token, logprob, bytes}` entry per token with text, whose
tokens join to the transcript's text, and Whisper's `avg_logprob`."""

from __future__ import annotations

import math

import pytest

from engine.types import Token, Transcript
from streaming.events import Final
from streaming.protocols.openai.logprobs import after, average, entries, of_finals


def tok(text: str, logprob: float | None = None, k: int = 0) -> Token:
    return Token(k + 1, text, 100 * k, 100 * k + 90, logprob=logprob)


def final(text: str, *tokens: Token) -> Final:
    return Final(0, 0, 1000, Transcript(text, "en", "neutral", "speech", True, text, tokens))


def joined(out: list[dict[str, object]]) -> str:
    return "".join(str(e["token"]) for e in out)


HELLO = (tok(" Hello", -0.25, 0), tok(",", -1.5, 1), tok(" world", -0.0625, 2))


def test_an_entry_is_the_tokens_text_logprob_and_utf8_bytes() -> None:
    out = entries((tok(" 你好", -0.5), tok("é", None, 1)), lead=None)
    assert out == [
        {"token": " 你好", "logprob": -0.5, "bytes": list(" 你好".encode())},
        {"token": "é", "logprob": None, "bytes": [0xC3, 0xA9]},
    ]
    assert len(out[0]["bytes"]) == 7  # bytes, not characters


def test_a_logprob_is_rounded_to_six_places() -> None:
    ((entry),) = entries((tok("a", -1 / 3),))
    assert entry["logprob"] == -0.333333


def test_the_first_tokens_leading_spaces_become_the_lead() -> None:
    # "" as a transcript's text is stripped; " " as a second final is joined; None: as is.
    assert joined(entries(HELLO)) == "Hello, world"
    assert joined(entries(HELLO, " ")) == " Hello, world"
    assert joined(entries((tok("  Hi"), tok(" there", k=1)), " ")) == " Hi there"
    assert joined(entries(HELLO, lead=None)) == " Hello, world"
    # Only the first token is led: the others keep their spaces.
    assert [e["token"] for e in entries(HELLO)] == ["Hello", ",", " world"]
    # The lead changes the text, never the value.
    assert [e["logprob"] for e in entries(HELLO, " ")] == [-0.25, -1.5, -0.0625]


def test_tokens_without_text_are_skipped_and_the_lead_goes_to_the_first_with_text() -> None:
    tokens = (tok("", None, 0), tok(" ", -0.1, 1), tok(" ok", -0.2, 2), tok("", None, 3))
    assert entries(tokens) == [{"token": "ok", "logprob": -0.2, "bytes": list(b"ok")}]
    # As they are, a lone space is text: it is kept.
    assert [e["token"] for e in entries(tokens, None)] == [" ", " ok"]
    # A lone space ("▁") before a digit: the text is stripped of it, so the lead goes to
    # the digit.
    digits = (tok(" ", -0.1, 0), tok("4", -0.3, 1))
    assert [e["token"] for e in entries(digits)] == ["4"]
    assert [e["token"] for e in entries(digits, " ")] == [" 4"]


def test_finals_are_joined_as_their_texts_are_and_empty_ones_skipped() -> None:
    one = final("Hello, world", *HELLO)
    noise = final("", tok(" ", -3.0))
    two = final("again", tok(" again", -0.75, 3))
    out = of_finals([noise, one, noise, two])
    assert joined(out) == "Hello, world again"
    assert [e["logprob"] for e in out] == [-0.25, -1.5, -0.0625, -0.75]
    assert of_finals([]) == [] and of_finals([noise]) == []


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        (0, ["Hello", ",", " world"]),
        (5, [",", " world"]),  # "Hello" went out: the tokens past it
        (6, [" world"]),
        (3, ["Hello", ",", " world"]),  # sent inside a token: that token is not all sent
        (9, [" world"]),
        (12, []),  # all of it
        (40, []),
    ],
)
def test_after_gives_the_tokens_that_end_past_what_was_sent(sent: int, expected: list[str]) -> None:
    out = after(final("Hello, world", *HELLO), sent)
    assert [e["token"] for e in out] == expected
    # With their own values, not the first tokens'.
    values = {"Hello": -0.25, ",": -1.5, " world": -0.0625}
    assert [e["logprob"] for e in out] == [values[t] for t in expected]


def test_after_a_token_boundary_the_rest_joins_to_the_rest_of_the_text() -> None:
    done = final("Hello, world", *HELLO)
    for sent in (0, 5, 6, 12):
        assert joined(after(done, sent)) == done.transcript.text[sent:]


def test_average_is_the_mean_logprob_of_the_scored_tokens() -> None:
    assert average(HELLO) == pytest.approx((-0.25 - 1.5 - 0.0625) / 3)
    # An unscored (redacted) token counts for nothing, neither as 0 nor as a token.
    assert average((*HELLO, tok(" [PCI]", None, 3))) == pytest.approx((-0.25 - 1.5 - 0.0625) / 3)
    assert average((tok("a", -1 / 3), tok("b", -1 / 3))) == -0.333333
    assert average((tok("a", math.log(0.5)),)) == pytest.approx(math.log(0.5))


def test_average_is_zero_with_nothing_scored() -> None:
    assert average(()) == 0.0
    assert average((tok("a"), tok("b", k=1))) == 0.0


def test_a_lone_space_piece_before_the_first_word_adds_no_second_space() -> None:
    # SentencePiece decodes ["▁", "▁the"] as "the": the text has one space, so must these.
    finals = [
        final("hello", tok(" hello", -0.1)),
        final("the", tok(" ", -0.2, 0), tok(" the", -0.3, 1)),
    ]
    out = of_finals(finals)
    assert joined(out) == "hello the"
    assert [e["logprob"] for e in out] == [-0.1, -0.3]
