"""An utterance's transcript from its pieces: joined text, tokens on one clock, tags."""

from __future__ import annotations

from engine.types import Token, Transcript
from streaming.pieces.joining import Decoded, composed, separator


def said(text: str, lang: str = "en", emotion: str = "neutral") -> Transcript:
    tokens = tuple(Token(i, f" {w}", i * 100, (i + 1) * 100) for i, w in enumerate(text.split()))
    return Transcript(text, lang, emotion, "speech", True, text, tokens)


def test_pieces_join_with_a_space_but_not_in_chinese_or_japanese() -> None:
    assert separator("Hello,", "how are you?") == " "
    assert separator("你好，", "今天怎么样？") == ""
    assert separator("Hello.", "你好") == ""
    assert separator("", "Hello") == "" and separator("Hello", "") == ""


def test_tokens_move_onto_the_utterance_clock_and_still_spell_the_text() -> None:
    pieces = [Decoded(16000, 32000, said("Hello there,")), Decoded(32000, 56000, said("how are"))]
    t = composed(pieces, utt_start=16000, itn=True)
    assert t.text == "Hello there, how are"
    assert "".join(k.text for k in t.tokens).strip() == t.text
    assert [(k.text, k.start_ms) for k in t.tokens][2:] == [(" how", 1000), (" are", 1100)]


def test_an_unspaced_piece_joins_its_first_token_without_a_space() -> None:
    first = Transcript(
        "你好", "zh", "neutral", "speech", True, "你好", (Token(1, " 你好", 0, 300),)
    )
    second = Transcript(
        "再见", "zh", "neutral", "speech", True, "再见", (Token(2, " 再见", 0, 300),)
    )
    t = composed([Decoded(0, 8000, first), Decoded(8000, 16000, second)], 0, True)
    assert t.text == "你好再见" and "".join(k.text for k in t.tokens).strip() == t.text


def test_the_tags_are_the_longest_pieces() -> None:
    pieces = [
        Decoded(0, 8000, said("Yes.", "en", "neutral")),
        Decoded(8000, 48000, said("Ich bin sehr froh.", "de", "happy")),
    ]
    t = composed(pieces, 0, True)
    assert (t.lang, t.emotion) == ("de", "happy")


def test_no_pieces_is_an_empty_transcript() -> None:
    assert composed([], 0, True).text == ""
