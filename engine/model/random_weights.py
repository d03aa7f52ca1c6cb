"""Build a SenseVoiceSmall model dir with random weights, for tests and offline development.

The dir has the real SenseVoiceSmall layout (model.pt, config.yaml, am.mvn,
configuration.json and a 25055-piece sentencepiece model with the special tokens at the
ids funasr hard-codes), so funasr's AutoModel and our engine load it like the real model.
The real model's small files (its config, `configuration.json` and CMVN statistics) ship
with this package under `assets/sensevoice_small/`, so a build needs nothing beside it.
Transcripts are meaningless: the weights are random.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import random
import re
import sys
import time
from collections.abc import Iterator
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

VOCAB_SIZE = 25055
SPECIAL_START = 24884
BPE_MODEL_NAME = "chn_jpn_yue_eng_ko_spectok.bpe.model"
MARKER_NAME = "sensestream_test_model.json"
COPIED_FILES = ("configuration.json", "am.mvn")
SIZES = ("tiny", "full")
TINY_ENCODER = {
    "output_size": 64,
    "attention_heads": 2,
    "linear_units": 128,
    "num_blocks": 2,
    "tp_blocks": 1,
}
TRAINED_VOCAB = 1000


def assets() -> Traversable:
    """The package's data files: the real model's small files and the tokenizer corpus."""
    return files("engine.model") / "assets"


# Special tokens at fixed ids; every other id in SPECIAL_START..VOCAB_SIZE-1 is reserved.
# funasr's model.py hard-codes the language, emotion and text-norm ids. The order of the
# event tokens (24993..25000) is not confirmed for the real model.
SPECIAL_TOKENS: dict[int, str] = {
    24884: "<|zh|>",
    24885: "<|en|>",
    24888: "<|yue|>",
    24892: "<|ja|>",
    24896: "<|ko|>",
    24992: "<|nospeech|>",
    24993: "<|Speech|>",
    24994: "<|BGM|>",
    24995: "<|Applause|>",
    24996: "<|Laughter|>",
    24997: "<|Cry|>",
    24998: "<|Sneeze|>",
    24999: "<|Breath|>",
    25000: "<|Cough|>",
    25001: "<|HAPPY|>",
    25002: "<|SAD|>",
    25003: "<|ANGRY|>",
    25004: "<|NEUTRAL|>",
    25005: "<|FEARFUL|>",
    25006: "<|DISGUSTED|>",
    25007: "<|SURPRISED|>",
    25009: "<|EMO_UNKNOWN|>",
    25010: "<|Sing|>",
    25011: "<|Speech_Noise|>",
    25012: "<|Event_UNK|>",
    25013: "<|GBG|>",
    25016: "<|withitn|>",
    25017: "<|woitn|>",
}


def make_config_text(real_text: str, size: str) -> str:
    """Return config.yaml text: the real one for full, smaller encoder_conf values for tiny."""
    return real_text if size == "full" else with_encoder_conf(real_text, TINY_ENCODER)


def with_encoder_conf(real_text: str, values: dict[str, int]) -> str:
    """config.yaml text with these `encoder_conf` numbers in place of the real ones."""
    text = real_text
    for key, value in values.items():
        pattern = re.compile(rf"^(\s+{key}:)\s*\d+\s*$", re.MULTILINE)
        text, count = pattern.subn(rf"\g<1> {value}", text)
        if count != 1:
            raise ValueError(f"config.yaml: expected one '{key}:' line, found {count}")
    return text


def load_config(text: str) -> dict[str, Any]:
    """Parse config.yaml text and check the encoder/model entries the build needs."""
    import yaml

    config = yaml.safe_load(text)
    if not isinstance(config, dict) or "encoder_conf" not in config:
        raise ValueError("config.yaml has no encoder_conf")
    return config


def build_model(config: dict[str, Any], seed: int) -> Any:
    """Build funasr's SenseVoiceSmall with random weights from the config."""
    import torch

    from engine.model.network import sensevoice_from_config

    torch.manual_seed(seed)
    model = sensevoice_from_config({**config, "vocab_size": VOCAB_SIZE})
    model.eval()
    return model


def corpus_sentences(rounds: int = 20) -> Iterator[str]:
    """Yield the tokenizer training corpus: the fixed sentences, shuffled per round (seeded)."""
    text = (assets() / "tokenizer_corpus.txt").read_text(encoding="utf-8")
    base = [line for line in text.splitlines() if line]
    for round_no in range(rounds):
        yield from random.Random(round_no).sample(base, len(base))


def train_bpe(
    sentences: Iterator[str] | None = None, vocab: int = TRAINED_VOCAB, threads: int = 1
) -> bytes:
    """Train a small BPE sentencepiece model in memory (on the test corpus unless given
    `sentences`) and return its serialized proto."""
    import sentencepiece as spm

    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=corpus_sentences() if sentences is None else sentences,
        model_writer=buffer,
        model_type="bpe",
        vocab_size=vocab,
        hard_vocab_limit=False,
        character_coverage=1.0,
        byte_fallback=False,
        normalization_rule_name="identity",
        num_threads=threads,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    return buffer.getvalue()


def special_piece(piece_id: int) -> str:
    """Return the special piece for an id in the special range."""
    return SPECIAL_TOKENS.get(piece_id, f"<|reserved_{piece_id}|>")


#: The score of padding pieces (minus their id): no encoding ever picks them.
FILLER_SCORE = -1.0e6


def pad_tokenizer(trained: bytes) -> bytes:
    """Pad a trained model to VOCAB_SIZE pieces: NORMAL fillers, then the special range."""
    # The generated protobuf module has no type information.
    pb: Any = importlib.import_module("sentencepiece.sentencepiece_model_pb2")

    proto = pb.ModelProto()
    proto.ParseFromString(trained)
    n_trained = len(proto.pieces)
    if n_trained >= SPECIAL_START:
        raise ValueError(f"trained tokenizer too large: {n_trained} pieces")
    seen = {p.piece for p in proto.pieces}
    for piece_id in range(n_trained, VOCAB_SIZE):
        piece = proto.pieces.add()
        if piece_id < SPECIAL_START:
            piece.piece = f"▁w{piece_id}"
            piece.score = FILLER_SCORE - piece_id
            piece.type = pb.ModelProto.SentencePiece.NORMAL
        else:
            piece.piece = special_piece(piece_id)
            piece.score = 0.0
            piece.type = pb.ModelProto.SentencePiece.USER_DEFINED
        if piece.piece in seen:
            raise ValueError(f"duplicate tokenizer piece {piece.piece!r}")
        seen.add(piece.piece)
    proto.trainer_spec.vocab_size = VOCAB_SIZE
    return bytes(proto.SerializeToString())


def check_tokenizer(model_bytes: bytes) -> None:
    """Load the padded tokenizer and verify its size and special ids."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    if sp.get_piece_size() != VOCAB_SIZE:
        raise ValueError(f"tokenizer has {sp.get_piece_size()} pieces, want {VOCAB_SIZE}")
    for piece_id, piece in SPECIAL_TOKENS.items():
        if sp.piece_to_id(piece) != piece_id:
            raise ValueError(f"{piece} at id {sp.piece_to_id(piece)}, want {piece_id}")


def write_model(out: Path, model: Any) -> int:
    """Save the model's plain state_dict to model.pt; return its parameter count."""
    import torch

    torch.save(model.state_dict(), out / "model.pt")
    return int(sum(p.numel() for p in model.parameters()))


def write_marker(out: Path, size: str, seed: int, parameters: int) -> None:
    """Write the marker file that tells servers this is a random-weight test model."""
    marker = {
        "test_model": True,
        "size": size,
        "seed": seed,
        "parameters": parameters,
        "warning": "random weights: transcripts are meaningless",
    }
    (out / MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")


def build(out: Path, size: str, seed: int = 0) -> int:
    """Write the whole model dir; return the parameter count."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}; got {size!r}")
    real = assets() / "sensevoice_small"
    config_text = make_config_text((real / "config.yaml").read_text(encoding="utf-8"), size)
    config = load_config(config_text)
    tokenizer = pad_tokenizer(train_bpe())
    check_tokenizer(tokenizer)
    model = build_model(config, seed)

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(config_text, encoding="utf-8")
    for name in COPIED_FILES:
        (out / name).write_bytes((real / name).read_bytes())
    (out / BPE_MODEL_NAME).write_bytes(tokenizer)
    parameters = write_model(out, model)
    write_marker(out, size, seed, parameters)
    return parameters


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        prog="python -m engine.model.random_weights",
        description="Build a SenseVoiceSmall model dir with RANDOM weights (for tests).",
    )
    parser.add_argument("--size", choices=SIZES, required=True)
    parser.add_argument("--out", type=Path, required=True, help="model dir to write")
    parser.add_argument("--seed", type=int, default=0, help="torch seed for the weights")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    args = parse_args(argv)
    start = time.perf_counter()
    parameters = build(args.out, args.size, args.seed)
    seconds = time.perf_counter() - start
    print(
        f"make_test_model: wrote {args.size} model (RANDOM weights, seed {args.seed}) to "
        f"{args.out}: {parameters:,} parameters in {seconds:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
