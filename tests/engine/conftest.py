"""A small real sentencepiece tokenizer with every SenseVoice tag piece, built at test time."""

from __future__ import annotations

import io
from functools import cache
from pathlib import Path

import pytest
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from engine.model.tags import KNOWN_TAGS, tag_piece
from engine.model.tokenizer import Tokenizer

TRAINING_SENTENCES: tuple[str, ...] = (
    "hello world this is a test of the speech server",
    "the quick brown fox jumps over the lazy dog",
    "speech recognition turns sound into words",
    "she sells sea shells by the sea shore",
    "a journey of a thousand miles begins with a single step",
    "we went to the park and had a picnic in the sun",
    "please call me back when you get this message",
    "我们今天去公园散步",
    "你好世界这是一个测试",
    "天气很好我们出去玩吧",
    "语音识别把声音变成文字",
    "明天早上八点开会",
)

#: The tag pieces appended as USER_DEFINED pieces, plus one unlisted `<|...|>` piece.
UNLISTED_TAG = "<|reserved_1|>"
TAG_PIECES: tuple[str, ...] = (
    *(tag_piece(name) for names in KNOWN_TAGS.values() for name in names),
    UNLISTED_TAG,
)


@cache
def tag_model_proto() -> bytes:
    """Train a ~300-piece BPE model in memory and append the tag pieces to it."""
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAINING_SENTENCES * 4),
        model_writer=buffer,
        vocab_size=300,
        hard_vocab_limit=False,
        character_coverage=1.0,
        model_type="bpe",
        minloglevel=2,
    )
    proto = model_pb2.ModelProto()  # type: ignore[attr-defined]
    proto.ParseFromString(buffer.getvalue())
    for piece in TAG_PIECES:
        entry = proto.pieces.add()
        entry.piece = piece
        entry.score = 0.0
        entry.type = model_pb2.ModelProto.SentencePiece.USER_DEFINED  # type: ignore[attr-defined]
    data: bytes = proto.SerializeToString()
    # Fail here, not in a test, if sentencepiece rejects the edited proto.
    spm.SentencePieceProcessor(model_proto=data)
    return data


def make_tag_tokenizer(tmp_path: Path) -> Tokenizer:
    """Write the tag model to `tmp_path` and load it through Tokenizer.from_file."""
    path = tmp_path / "tags.bpe.model"
    path.write_bytes(tag_model_proto())
    return Tokenizer.from_file(path)


@pytest.fixture(scope="session")
def tag_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    return make_tag_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@cache
def _processor() -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_proto=tag_model_proto())


def encode(text: str) -> list[int]:
    """Text ids for `text` under the tag model (Tokenizer itself only decodes)."""
    return [int(i) for i in _processor().encode(text)]
