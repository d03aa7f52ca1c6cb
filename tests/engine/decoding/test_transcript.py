"""decode_transcript: timing, text, tokens, rich text and the empty case."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.decoding.rich_text import render_rich_text
from engine.decoding.transcript import PROMPT_FRAMES, decode_transcript
from engine.model.tags import UNKNOWN, TagKind, TagTable, tag_piece
from engine.model.tokenizer import Tokenizer
from engine.types import FRAME_MS, Transcript
from tests.engine.conftest import encode


@pytest.fixture(scope="module")
def table(tag_tokenizer: Tokenizer) -> TagTable:
    return TagTable.from_tokenizer(tag_tokenizer)


def ids_of(tokenizer: Tokenizer, *names: str) -> list[int]:
    ids = [tokenizer.piece_to_id(tag_piece(name)) for name in names]
    assert all(i is not None for i in ids)
    return [i for i in ids if i is not None]


def decode(
    tokenizer: Tokenizer, table: TagTable, frames: list[int], duration_ms: int = 10_000
) -> Transcript:
    return decode_transcript(np.array(frames, dtype=np.int64), tokenizer, table, duration_ms, True)


def test_token_times_follow_their_frames(tag_tokenizer: Tokenizer, table: TagTable) -> None:
    prompt = ids_of(tag_tokenizer, "en", "NEUTRAL", "Speech", "woitn")
    a, b = encode("hello world")
    # Speech frames 0 and 1 hold `a`, then a blank, then `b` on speech frame 3.
    result = decode(tag_tokenizer, table, [*prompt, a, a, 0, b])
    assert [(t.id, t.start_ms, t.end_ms) for t in result.tokens] == [
        (a, 0, 2 * FRAME_MS),
        (b, 3 * FRAME_MS, 4 * FRAME_MS),
    ]
    assert [t.text for t in result.tokens] == [" hello", " world"]
    assert result.text == "hello world"
    assert result.rich_text == "hello world"


def test_times_are_clamped_to_the_audio(tag_tokenizer: Tokenizer, table: TagTable) -> None:
    (hello,) = encode("hello")
    (world,) = encode("world")
    # A text token inside the prompt frames starts at 0; one past the audio ends at its end.
    frames = [hello, 0, 0, 0, 0, 0, world, world, world]
    result = decode(tag_tokenizer, table, frames, duration_ms=150)
    assert [(t.start_ms, t.end_ms) for t in result.tokens] == [(0, 0), (120, 150)]


def test_tags_are_not_tokens(tag_tokenizer: Tokenizer, table: TagTable) -> None:
    prompt = ids_of(tag_tokenizer, "zh", "HAPPY", "BGM", "withitn")
    text_ids = encode("你好世界")
    result = decode(tag_tokenizer, table, [*prompt, *text_ids])
    assert [t.id for t in result.tokens] == text_ids
    assert result.text == "你好世界"
    assert (result.lang, result.emotion, result.event, result.itn) == ("zh", "happy", "bgm", True)
    assert result.rich_text == "🎼你好世界😊"


def test_token_texts_concatenate_to_the_text(tag_tokenizer: Tokenizer, table: TagTable) -> None:
    text = "the quick brown fox jumps over the lazy dog"
    frames = [0] * PROMPT_FRAMES + [i for token_id in encode(text) for i in (token_id, 0)]
    result = decode(tag_tokenizer, table, frames)
    assert "".join(t.text for t in result.tokens).strip() == text == result.text


@pytest.mark.parametrize("frames", [[], [0], [0] * 50])
def test_empty_output(tag_tokenizer: Tokenizer, table: TagTable, frames: list[int]) -> None:
    result = decode(tag_tokenizer, table, frames)
    assert result == Transcript(
        text="",
        lang=UNKNOWN,
        emotion=UNKNOWN,
        event=UNKNOWN,
        itn=True,
        rich_text="",
        tokens=(),
    )


def test_tags_only(tag_tokenizer: Tokenizer, table: TagTable) -> None:
    prompt = ids_of(tag_tokenizer, "nospeech", "EMO_UNKNOWN", "Event_UNK", "woitn")
    result = decode(tag_tokenizer, table, prompt)
    assert (result.text, result.tokens, result.lang, result.itn) == ("", (), "nospeech", False)


def test_negative_duration_is_rejected(tag_tokenizer: Tokenizer, table: TagTable) -> None:
    with pytest.raises(ValueError, match="duration_ms"):
        decode(tag_tokenizer, table, [0], duration_ms=-1)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), duration_ms=st.integers(min_value=0, max_value=5_000))
def test_decode_invariants(
    tag_tokenizer: Tokenizer, table: TagTable, data: st.DataObject, duration_ms: int
) -> None:
    """Any frame sequence: ordered, clamped spans; tag-free text and tokens; funasr rich text."""
    vocab = st.integers(min_value=0, max_value=tag_tokenizer.vocab_size - 1)
    # Mostly blanks and tags so that runs, repeats and tag mixes are all common.
    frame_id = st.one_of(st.just(0), st.sampled_from(sorted(table.by_id)), vocab)
    frames = data.draw(st.lists(frame_id, max_size=80))
    result = decode(tag_tokenizer, table, frames, duration_ms)

    starts = [t.start_ms for t in result.tokens]
    assert starts == sorted(starts)
    for token in result.tokens:
        assert 0 <= token.start_ms <= token.end_ms <= duration_ms
        assert not table.is_tag(token.id)
        assert "<|" not in token.text
    assert "<|" not in result.text
    # funasr's rendering, except that reserved tags (which funasr prints verbatim) are dropped.
    kept = [i for i in collapsed(frames) if table.kind(i) is not TagKind.OTHER]
    assert result.rich_text == render_rich_text(tag_tokenizer.decode(kept))
    assert "reserved" not in result.rich_text


def collapsed(frames: list[int]) -> list[int]:
    """Naive greedy CTC collapse with blank 0."""
    out: list[int] = []
    previous = None
    for token_id in frames:
        if token_id not in (previous, 0):
            out.append(token_id)
        previous = token_id
    return out
