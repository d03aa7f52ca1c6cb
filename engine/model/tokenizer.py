"""A thin typed wrapper around the model's sentencepiece tokenizer."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import sentencepiece as spm

from engine.errors import ModelDirIncompleteError

#: sentencepiece's marker for a word boundary (a space before the piece).
WORD_BOUNDARY = "▁"


class Tokenizer:
    """Id/piece lookups and decoding for one loaded sentencepiece model."""

    __slots__ = ("_size", "_sp")

    def __init__(self, processor: spm.SentencePieceProcessor) -> None:
        self._sp = processor
        self._size = int(processor.get_piece_size())

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """Load a `.model` file, raising ModelDirIncompleteError if it is missing or bad."""
        model_path = Path(path)
        if not model_path.is_file():
            raise ModelDirIncompleteError(f"tokenizer model not found: {model_path}")
        try:
            processor = spm.SentencePieceProcessor(model_file=str(model_path))
        except (OSError, RuntimeError) as exc:
            raise ModelDirIncompleteError(
                f"tokenizer model {model_path} is not a loadable sentencepiece model: {exc}"
            ) from exc
        return cls(processor)

    @classmethod
    def from_serialized(cls, model_proto: bytes) -> Tokenizer:
        """Load a serialized sentencepiece ModelProto held in memory."""
        try:
            processor = spm.SentencePieceProcessor(model_proto=model_proto)
        except (OSError, RuntimeError) as exc:
            raise ModelDirIncompleteError(
                f"bytes are not a loadable sentencepiece model: {exc}"
            ) from exc
        return cls(processor)

    def serialized(self) -> bytes:
        """The sentencepiece model as bytes (`from_serialized` loads them back)."""
        return bytes(self._sp.serialized_model_proto())

    @property
    def vocab_size(self) -> int:
        """Number of pieces, which is also the CTC output width."""
        return self._size

    def piece(self, token_id: int) -> str:
        """The piece for an id, e.g. `▁hello` or `<|en|>`."""
        self._check_id(token_id)
        return str(self._sp.id_to_piece(token_id))

    def pieces(self) -> list[str]:
        """Every piece, in id order (one call into sentencepiece, not one per id)."""
        return [str(p) for p in self._sp.id_to_piece(list(range(self._size)))]

    def is_control(self, token_id: int) -> bool:
        """True for sentencepiece control pieces (`<s>`, `</s>`), which decode to nothing."""
        self._check_id(token_id)
        return bool(self._sp.is_control(token_id))

    def piece_to_id(self, piece: str) -> int | None:
        """The id of an exact piece, or None when the vocabulary lacks it."""
        token_id = int(self._sp.piece_to_id(piece))
        # sentencepiece answers the unknown id for absent pieces, so confirm the round trip.
        if self._sp.id_to_piece(token_id) != piece:
            return None
        return token_id

    def encode(self, text: str) -> list[int]:
        """The ids sentencepiece splits `text` into (the unknown id for what it cannot)."""
        return [int(i) for i in self._sp.encode(text)]

    @property
    def unknown_id(self) -> int:
        """The id sentencepiece gives what its vocabulary cannot spell."""
        return int(self._sp.unk_id())

    def decode(self, ids: Sequence[int]) -> str:
        """Decode ids to text exactly as sentencepiece (and so funasr) does."""
        id_list = [int(i) for i in ids]
        for token_id in id_list:
            self._check_id(token_id)
        return str(self._sp.decode(id_list))

    def _check_id(self, token_id: int) -> None:
        if not 0 <= token_id < self._size:
            raise IndexError(f"token id {token_id} outside the vocabulary of {self._size}")
