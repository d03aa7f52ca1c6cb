"""Feature shards with SenseVoice targets, built in parallel and resumably.

A shard is one `.npz`: the utterances' features (fp16, CMVN applied, exactly as the
engine's frontend computes them), and for each utterance its token ids in both text-norm
modes and its event. A target is `[<|en|>, <|NEUTRAL|>, event, itn] + text ids`, as
funasr's SenseVoiceSmall.forward expects (tags first, then the CTC part).
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.features.fbank import Cmvn, Frontend, FrontendConfig
from engine.model.random_weights import FILLER_SCORE, assets, pad_tokenizer, train_bpe
from tools.demo_model import augment as augmenting
from tools.demo_model import open_texts, pii_texts, texts, voices, wide_words

SHARD_SIZE = 400
TAG_PIECES = ("<|en|>", "<|NEUTRAL|>", "<|Speech|>", "<|BGM|>", "<|withitn|>", "<|woitn|>")


@dataclass(frozen=True, slots=True)
class Example:
    """One utterance: features and its two targets (with and without ITN)."""

    feats: np.ndarray  # [frames, 560] fp16
    written: np.ndarray  # int32 ids, tags first
    spoken: np.ndarray


def frontend() -> Frontend:
    """The engine's frontend with the real model's CMVN."""
    return Frontend(FrontendConfig(), Cmvn.from_file(str(assets() / "sensevoice_small/am.mvn")))


def train_tokenizer(count: int = 20000, vocab: int = 700, seed: int = 7) -> bytes:
    """A BPE model of the training text (both forms), padded to SenseVoice's layout."""
    stream = texts.training(seed)
    lines = [line for _ in range(count) for s in [next(stream)] for line in (s.written, s.spoken)]
    return pad_tokenizer(train_bpe(iter(lines), vocab, threads=2))


def trained_text(count: int = 3000, seed: int = 7) -> list[str]:
    """Both forms of base and PII sentences: text whose encoding new pieces must keep."""
    rng, base = random.Random(seed), texts.training(seed)
    out = []
    for _ in range(count):
        for s in (next(base), pii_texts.pii_sentence(rng).sentence):
            out += [s.written, s.spoken]
    return out


def extend_tokenizer(tokenizer: bytes, characters: str) -> bytes:
    """The padded tokenizer with a piece for each of `characters` it cannot write, each
    taking the first filler's id: the trained pieces keep their ids (a model trained on
    them, and shards encoded with them, stay valid) and the new ones join the live ids."""
    known = _pieces(tokenizer)
    # A single character is never a merge's product, so its score orders nothing.
    return _with_pieces(tokenizer, [c for c in dict.fromkeys(characters) if c not in known])


def extend_pieces(
    tokenizer: bytes, lines: Iterator[str], vocab: int, keep: Sequence[str] = ()
) -> bytes:
    """The padded tokenizer with the pieces of a BPE model of `lines` (`vocab` pieces) that
    it lacks, appended as `extend_tokenizer` appends characters: the trained pieces keep
    their ids and scores, and the new ones score below them in their own merge order.

    A new piece that would change how any word of `keep` is written is left out, so text
    the model was trained on encodes exactly as before and only new words take new pieces.
    """
    pb: Any = importlib.import_module("sentencepiece.sentencepiece_model_pb2")
    learned = pb.ModelProto()
    learned.ParseFromString(train_bpe(lines, vocab, threads=2))
    known = _pieces(tokenizer)
    normal = pb.ModelProto.SentencePiece.NORMAL
    new = [p.piece for p in learned.pieces if p.type == normal and p.piece not in known]
    words = sorted({w for line in keep for w in line.split()})
    before = _encoder(tokenizer).encode(words, out_type=str)
    while True:
        extended = _with_pieces(tokenizer, new)
        after = _encoder(extended).encode(words, out_type=str)
        spoiling = {p for old, now in zip(before, after, strict=True) if old != now for p in now}
        if not spoiling & set(new):
            return extended
        new = [p for p in new if p not in spoiling]


def _pieces(tokenizer: bytes) -> set[str]:
    pb: Any = importlib.import_module("sentencepiece.sentencepiece_model_pb2")
    proto = pb.ModelProto()
    proto.ParseFromString(tokenizer)
    return {p.piece for p in proto.pieces}


def _encoder(tokenizer: bytes) -> Any:
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_proto=tokenizer)


def _with_pieces(tokenizer: bytes, new: Sequence[str]) -> bytes:
    """`tokenizer` with `new` in the first fillers' places, scored below every trained
    piece in their order."""
    pb: Any = importlib.import_module("sentencepiece.sentencepiece_model_pb2")
    proto = pb.ModelProto()
    proto.ParseFromString(tokenizer)
    first_filler = next(i for i, p in enumerate(proto.pieces) if p.score <= FILLER_SCORE)
    lowest = min(p.score for p in proto.pieces[:first_filler])
    for offset, text in enumerate(new):
        piece = proto.pieces[first_filler + offset]
        piece.piece, piece.score = text, lowest - 1.0 - offset
        piece.type = pb.ModelProto.SentencePiece.NORMAL
    return bytes(proto.SerializeToString())


class Targets:
    """Token ids of tags and text, from the padded tokenizer."""

    def __init__(self, tokenizer: bytes) -> None:
        import sentencepiece as spm

        self._sp = spm.SentencePieceProcessor(model_proto=tokenizer)
        self._tag = {piece: self._sp.piece_to_id(piece) for piece in TAG_PIECES}

    def ids(self, text: str, *, itn: bool, music: bool) -> np.ndarray:
        tags = [
            self._tag["<|en|>"],
            self._tag["<|NEUTRAL|>"],
            self._tag["<|BGM|>" if music else "<|Speech|>"],
            self._tag["<|withitn|>" if itn else "<|woitn|>"],
        ]
        return np.asarray(tags + list(self._sp.encode(text)), np.int32)

    def writable(self, text: str) -> bool:
        """Whether every character of `text` has a piece (no unknown id)."""
        return self._sp.unk_id() not in self._sp.encode(text)


#: Share of examples that are several sentences with pauses between them (up to ~15 s),
#: so whole-file decoding of a few sentences is within what the model has seen.
LONG_SHARE = 0.15


#: Share of training sentences whose slots take the wide vocabulary (`wide_words`), in a
#: data set built with `--wide`; 0 keeps the base sentences only.
WIDE_SHARE = 0.5


#: Share of training sentences that carry what redaction removes (`pii_texts`: card
#: numbers, expiry dates, codes, phone and social security numbers, e-mail addresses), in
#: a data set built with `--pii`.
PII_SHARE = 0.4


#: Share of training sentences from the open vocabulary (`open_texts`: English words,
#: names, streets, numbers read every way, e-mail addresses, spelled letters), in a data
#: set built with `--open`.
OPEN_SHARE = 0.6


@dataclass(frozen=True, slots=True)
class Mix:
    """The shares of a data set's sentences drawn beyond the base ones: `open` (the open
    vocabulary), then `wide` of the rest (slot values from the wide vocabulary), then `pii`
    of the rest; and the share of its utterances over background `music`."""

    wide: float = 0.0
    pii: float = 0.0
    open: float = 0.0
    music: float = augmenting.MUSIC_SHARE


#: The easy set's voices (a curriculum's first part): a few clear ones.
CLEAN_VOICES = tuple(
    voices.Voice("espeak", f"{accent}+{variant}")
    for accent in ("en-us", "en-gb")
    for variant in ("m1", "m3", "f1", "f3", "klatt", "david")
)


def make_example(
    index: int,
    seed: int,
    targets: Targets,
    front: Frontend,
    clean: bool = False,
    *,
    mix: Mix = Mix(),
    lexicon: open_texts.Lexicon | None = None,
) -> Example:
    """Utterance `index` of the training set: deterministic in (seed, index). `clean`:
    of the easy set: one sentence, a clear voice at its own pace, silence around it.
    `mix`: the shares of sentences beyond the base ones (`lexicon`: the open vocabulary's
    lists, needed when `mix.open` is not 0)."""
    rng = random.Random(seed * 1_000_003 + index)
    if clean:
        return _clean_example(rng, targets, front)
    count = rng.randint(2, 4) if rng.random() < LONG_SHARE else 1
    sentences = [_training_sentence(rng, targets, mix, lexicon) for _ in range(count)]
    voice, prosody = voices.pick_training_voice(rng), voices.Prosody.random(rng)
    parts: list[np.ndarray] = []
    for sentence in sentences:
        if parts:
            parts.append(np.zeros(int(rng.uniform(0.3, 1.0) * voices.SAMPLE_RATE), np.float32))
        parts.append(voices.speak(sentence.voiced, voice, prosody))
    rough = augmenting.augment(np.concatenate(parts), rng, mix.music)
    written = " ".join(s.written for s in sentences)
    spoken = " ".join(s.spoken for s in sentences)
    return Example(
        front.features(rough.audio).astype(np.float16),
        targets.ids(written, itn=True, music=rough.music),
        targets.ids(spoken, itn=False, music=rough.music),
    )


def _clean_example(rng: random.Random, targets: Targets, front: Frontend) -> Example:
    sentence = _training_sentence(rng, targets)
    prosody = voices.Prosody(rng.uniform(0.95, 1.05), rng.uniform(0.9, 1.1))
    speech = voices.speak(sentence.voiced, rng.choice(CLEAN_VOICES), prosody)
    audio = np.concatenate([np.zeros(1600, np.float32), speech, np.zeros(3200, np.float32)])
    return Example(
        front.features(audio * (0.5 / max(1e-6, float(np.abs(audio).max())))).astype(np.float16),
        targets.ids(sentence.written, itn=True, music=False),
        targets.ids(sentence.spoken, itn=False, music=False),
    )


def _training_sentence(
    rng: random.Random,
    targets: Targets,
    mix: Mix = Mix(),
    lexicon: open_texts.Lexicon | None = None,
) -> texts.Sentence:
    # A share of 0 draws nothing from `rng`, so a base data set is as it always was.
    if mix.open > 0 and rng.random() < mix.open:
        if lexicon is None:
            raise ValueError("an open-vocabulary mix needs the lexicon")
        return _drawn(lambda: open_texts.open_sentence(lexicon, rng), targets)
    if mix.wide > 0 and rng.random() < mix.wide:
        return _drawn(lambda: wide_words.wide_sentence(rng), targets)
    if mix.pii > 0 and rng.random() < mix.pii:
        return _drawn(lambda: pii_texts.pii_sentence(rng).sentence, targets)
    sentence = texts.sentence(rng)
    while sentence.held_out:
        sentence = texts.sentence(rng)
    return sentence


def _drawn(draw: Callable[[], texts.Sentence], targets: Targets) -> texts.Sentence:
    """The first drawn sentence that is not held out, says no hotword benchmark value and
    that the tokenizer can write."""
    sentence = draw()
    while (
        sentence.held_out
        or wide_words.says_held(sentence.spoken)
        or not targets.writable(sentence.written)
    ):
        sentence = draw()
    return sentence


def write_shard(path: Path, examples: Sequence[Example]) -> None:
    """Save examples as one npz, atomically."""
    partial = path.with_suffix(".partial.npz")
    np.savez(
        partial,
        frames=np.asarray([len(e.feats) for e in examples], np.int32),
        feats=np.concatenate([e.feats for e in examples]),
        written_len=np.asarray([len(e.written) for e in examples], np.int32),
        written=np.concatenate([e.written for e in examples]),
        spoken_len=np.asarray([len(e.spoken) for e in examples], np.int32),
        spoken=np.concatenate([e.spoken for e in examples]),
    )
    partial.replace(path)


def read_shard(path: Path) -> list[Example]:
    with np.load(path) as data:
        feats = np.split(data["feats"], np.cumsum(data["frames"])[:-1])
        written = np.split(data["written"], np.cumsum(data["written_len"])[:-1])
        spoken = np.split(data["spoken"], np.cumsum(data["spoken_len"])[:-1])
    return [Example(f, w, s) for f, w, s in zip(feats, written, spoken, strict=True)]


def _build_shard(job: tuple[Path, int, int, bytes, bool, Mix]) -> str:
    path, number, seed, tokenizer, clean, mix = job
    targets, front = Targets(tokenizer), frontend()
    lexicon = open_texts.Lexicon.load() if mix.open > 0 else None
    start = number * SHARD_SIZE
    examples = [
        make_example(start + i, seed, targets, front, clean, mix=mix, lexicon=lexicon)
        for i in range(SHARD_SIZE)
    ]
    write_shard(path, examples)
    return path.name


def build(
    out: Path,
    utterances: int,
    seed: int,
    tokenizer: bytes,
    workers: int,
    *,
    clean: bool = False,
    mix: Mix = Mix(),
) -> None:
    """Make the shards in `out` that are not there yet."""
    out.mkdir(parents=True, exist_ok=True)
    shards = -(-utterances // SHARD_SIZE)
    jobs = [
        (out / f"shard-{n:04d}.npz", n, seed, tokenizer, clean, mix)
        for n in range(shards)
        if not (out / f"shard-{n:04d}.npz").exists()
    ]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        for name in pool.imap_unordered(_build_shard, jobs):
            print(json.dumps({"shard": name}), flush=True)


def shard_paths(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("shard-*.npz") if ".partial" not in p.name)


def all_examples(folder: Path) -> Iterator[Example]:
    for path in shard_paths(folder):
        yield from read_shard(path)


def without_held(examples: Sequence[Example], tokenizer: bytes) -> list[Example]:
    """`examples` less any whose text says a hotword benchmark value: a guard for shards
    built before a value joined the list or a sentence frame slipped one in."""
    sp = _encoder(tokenizer)
    return [e for e in examples if not wide_words.says_held(sp.decode(e.spoken[4:].tolist()))]
