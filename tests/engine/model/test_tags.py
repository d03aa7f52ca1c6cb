"""Tokenizer wrapper and tag table: every tag reaches the right Transcript field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.decoding.transcript import PROMPT_FRAMES, decode_transcript
from engine.errors import ModelDirIncompleteError
from engine.model.tags import (
    EMOTION_TAGS,
    EVENT_TAGS,
    LANGUAGE_TAGS,
    UNKNOWN,
    TagKind,
    TagTable,
    tag_piece,
)
from engine.model.tokenizer import Tokenizer
from engine.types import Transcript
from tests.engine.conftest import UNLISTED_TAG, encode, tag_model_proto

HELLO = "hello world"


@pytest.fixture(scope="module")
def table(tag_tokenizer: Tokenizer) -> TagTable:
    return TagTable.from_tokenizer(tag_tokenizer)


def tag_id(tokenizer: Tokenizer, name: str) -> int:
    token_id = tokenizer.piece_to_id(tag_piece(name))
    assert token_id is not None, name
    return token_id


def decode_with_tags(
    tokenizer: Tokenizer, table: TagTable, tag_names: list[str], requested_itn: bool = True
) -> Transcript:
    """Tags in the prompt frames, then each text id held for two frames with blanks between."""
    prompt = [tag_id(tokenizer, name) for name in tag_names]
    prompt += [0] * (PROMPT_FRAMES - len(prompt))
    speech: list[int] = []
    for token_id in encode(HELLO):
        speech += [token_id, token_id, 0]
    frames = np.array(prompt + speech, dtype=np.int64)
    return decode_transcript(frames, tokenizer, table, 10_000, requested_itn)


# --- Tokenizer -------------------------------------------------------------------------------


def test_tokenizer_lookups(tag_tokenizer: Tokenizer) -> None:
    en = tag_id(tag_tokenizer, "en")
    assert tag_tokenizer.piece(en) == "<|en|>"
    assert tag_tokenizer.vocab_size > en
    assert tag_tokenizer.piece_to_id("<|not_a_tag|>") is None
    assert tag_tokenizer.decode(encode(HELLO)) == HELLO


def test_tokenizer_rejects_out_of_range_ids(tag_tokenizer: Tokenizer) -> None:
    with pytest.raises(IndexError):
        tag_tokenizer.piece(tag_tokenizer.vocab_size)
    with pytest.raises(IndexError):
        tag_tokenizer.decode([-1])


def test_tokenizer_from_serialized_matches_file(tag_tokenizer: Tokenizer) -> None:
    in_memory = Tokenizer.from_serialized(tag_model_proto())
    assert in_memory.vocab_size == tag_tokenizer.vocab_size
    assert [in_memory.piece(i) for i in range(in_memory.vocab_size)] == [
        tag_tokenizer.piece(i) for i in range(tag_tokenizer.vocab_size)
    ]


def test_tokenizer_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelDirIncompleteError, match="not found"):
        Tokenizer.from_file(tmp_path / "absent.bpe.model")


def test_tokenizer_unloadable_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.bpe.model"
    bad.write_bytes(b"this is not a sentencepiece model")
    with pytest.raises(ModelDirIncompleteError, match="not a loadable"):
        Tokenizer.from_file(bad)


# --- Tag table -------------------------------------------------------------------------------


def test_table_reads_ids_from_the_tokenizer(tag_tokenizer: Tokenizer, table: TagTable) -> None:
    for kind, names in (
        (TagKind.LANGUAGE, LANGUAGE_TAGS),
        (TagKind.EMOTION, EMOTION_TAGS),
        (TagKind.EVENT, EVENT_TAGS),
    ):
        for name in names:
            token_id = tag_id(tag_tokenizer, name)
            assert table.kind(token_id) is kind
            assert table.name(token_id) == name
    for name in ("withitn", "woitn"):
        assert table.kind(tag_id(tag_tokenizer, name)) is TagKind.ITN


def test_unlisted_tag_piece_is_an_other_tag(tag_tokenizer: Tokenizer, table: TagTable) -> None:
    reserved = tag_tokenizer.piece_to_id(UNLISTED_TAG)
    assert reserved is not None
    assert table.kind(reserved) is TagKind.OTHER
    assert table.name(reserved) == "reserved_1"


def test_text_pieces_are_not_tags(table: TagTable) -> None:
    for token_id in encode(HELLO):
        assert table.kind(token_id) is None
        assert table.name(token_id) is None


# --- Tags into Transcript fields -------------------------------------------------------------


@pytest.mark.parametrize("name", list(LANGUAGE_TAGS))
def test_every_language(tag_tokenizer: Tokenizer, table: TagTable, name: str) -> None:
    result = decode_with_tags(tag_tokenizer, table, [name, "NEUTRAL", "Speech", "woitn"])
    assert result.lang == name
    assert (result.emotion, result.event) == ("neutral", "speech")
    assert result.text == HELLO


@pytest.mark.parametrize(("name", "value"), list(EMOTION_TAGS.items()))
def test_every_emotion(tag_tokenizer: Tokenizer, table: TagTable, name: str, value: str) -> None:
    result = decode_with_tags(tag_tokenizer, table, ["en", name, "Speech", "woitn"])
    assert result.emotion == value
    assert result.lang == "en"
    assert result.text == HELLO


@pytest.mark.parametrize(("name", "value"), list(EVENT_TAGS.items()))
def test_every_event(tag_tokenizer: Tokenizer, table: TagTable, name: str, value: str) -> None:
    result = decode_with_tags(tag_tokenizer, table, ["zh", "HAPPY", name, "withitn"])
    assert result.event == value
    assert (result.lang, result.emotion) == ("zh", "happy")
    assert result.text == HELLO


def test_public_values() -> None:
    assert EMOTION_TAGS["EMO_UNKNOWN"] == UNKNOWN
    assert EVENT_TAGS["Event_UNK"] == UNKNOWN
    assert EVENT_TAGS["Speech_Noise"] == "speech_noise"


@pytest.mark.parametrize("requested", [True, False])
def test_itn_flag_follows_the_tag(
    tag_tokenizer: Tokenizer, table: TagTable, requested: bool
) -> None:
    tags = ["en", "NEUTRAL", "Speech"]
    with_itn = decode_with_tags(tag_tokenizer, table, [*tags, "withitn"], requested)
    without_itn = decode_with_tags(tag_tokenizer, table, [*tags, "woitn"], requested)
    assert with_itn.itn is True
    assert without_itn.itn is False


@pytest.mark.parametrize("requested", [True, False])
def test_itn_flag_falls_back_to_the_request(
    tag_tokenizer: Tokenizer, table: TagTable, requested: bool
) -> None:
    assert decode_with_tags(tag_tokenizer, table, ["en"], requested).itn is requested


def test_missing_tags_are_unknown(tag_tokenizer: Tokenizer, table: TagTable) -> None:
    result = decode_with_tags(tag_tokenizer, table, [])
    assert (result.lang, result.emotion, result.event) == (UNKNOWN, UNKNOWN, UNKNOWN)
    assert result.text == HELLO


def test_first_tag_of_each_kind_wins(tag_tokenizer: Tokenizer, table: TagTable) -> None:
    result = decode_with_tags(tag_tokenizer, table, ["ja", "SAD", "ko", "ANGRY"])
    assert (result.lang, result.emotion, result.event) == ("ja", "sad", UNKNOWN)


def test_unlisted_tags_never_reach_text(tag_tokenizer: Tokenizer, table: TagTable) -> None:
    reserved = tag_tokenizer.piece_to_id(UNLISTED_TAG)
    assert reserved is not None
    hello = encode(HELLO)
    frames = np.array([reserved, reserved, 0, 0, *hello[:1], reserved, *hello[1:]], np.int64)
    result = decode_transcript(frames, tag_tokenizer, table, 5_000, requested_itn=True)
    assert result.text == HELLO
    assert "<|" not in result.text
    assert all("<|" not in token.text for token in result.tokens)
    assert [token.id for token in result.tokens] == hello
