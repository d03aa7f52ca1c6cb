"""Shards and SenseVoice targets: tags first, in funasr's order, then the text's pieces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from engine.model.random_weights import check_tokenizer
from tools.demo_model.dataset import (
    Example,
    Mix,
    Targets,
    extend_pieces,
    extend_tokenizer,
    frontend,
    make_example,
    read_shard,
    train_tokenizer,
    write_shard,
)
from tools.demo_model.loss import live_ids


@pytest.fixture(scope="module")
def tokenizer() -> bytes:
    return train_tokenizer(count=2000, vocab=300)


def test_targets_are_language_emotion_event_textnorm_then_text(tokenizer: bytes) -> None:
    sp = spm.SentencePieceProcessor(model_proto=tokenizer)
    ids = Targets(tokenizer).ids("Your balance is $42.", itn=True, music=True)
    assert [sp.id_to_piece(int(i)) for i in ids[:4]] == [
        "<|en|>", "<|NEUTRAL|>", "<|BGM|>", "<|withitn|>",
    ]  # fmt: skip
    assert sp.decode(ids[4:].tolist()) == "Your balance is $42."
    plain = Targets(tokenizer).ids("your balance", itn=False, music=False)
    assert [sp.id_to_piece(int(i)) for i in plain[2:4]] == ["<|Speech|>", "<|woitn|>"]


def test_the_tokenizer_has_sensevoices_layout(tokenizer: bytes) -> None:
    sp = spm.SentencePieceProcessor(model_proto=tokenizer)
    assert sp.get_piece_size() == 25055
    assert sp.piece_to_id("<|en|>") == 24885 and sp.piece_to_id("<|woitn|>") == 25017


def test_an_example_is_deterministic_and_its_features_are_the_engines(tokenizer: bytes) -> None:
    targets, front = Targets(tokenizer), frontend()
    first, again = (make_example(7, 3, targets, front) for _ in range(2))
    assert np.array_equal(first.feats, again.feats)
    assert np.array_equal(first.written, again.written)
    assert first.feats.dtype == np.float16 and first.feats.shape[1] == 560
    assert make_example(8, 3, targets, front).feats.shape != first.feats.shape


def test_a_shard_reads_back_what_was_written(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    examples = [
        Example(
            rng.standard_normal((n, 560)).astype(np.float16),
            np.arange(4 + n % 5, dtype=np.int32),
            np.arange(6 + n % 3, dtype=np.int32),
        )
        for n in (3, 9, 5)
    ]
    write_shard(tmp_path / "shard-0000.npz", examples)
    back = read_shard(tmp_path / "shard-0000.npz")
    assert [e.feats.shape for e in back] == [(3, 560), (9, 560), (5, 560)]
    for a, b in zip(examples, back, strict=True):
        assert np.array_equal(a.feats, b.feats)
        assert np.array_equal(a.written, b.written) and np.array_equal(a.spoken, b.spoken)
    assert not list(tmp_path.glob("*.partial*"))


def test_the_easy_set_is_one_clear_sentence_with_no_music(tokenizer: bytes) -> None:
    targets, front = Targets(tokenizer), frontend()
    sp = spm.SentencePieceProcessor(model_proto=tokenizer)
    for index in range(5):
        example = make_example(index, 4, targets, front, clean=True)
        assert sp.id_to_piece(int(example.spoken[2])) == "<|Speech|>"
        assert len(example.feats) < 16.7 * 8  # one sentence, not several
        assert np.array_equal(example.feats, make_example(index, 4, targets, front, True).feats)


def test_a_wide_example_says_words_the_base_sentences_never_do(tokenizer: bytes) -> None:
    sp = spm.SentencePieceProcessor(model_proto=tokenizer)
    targets, front = Targets(tokenizer), frontend()
    base_words = {w for i in range(40) for w in _spoken(sp, make_example(i, 3, targets, front))}
    wide = [make_example(i, 3, targets, front, mix=Mix(wide=1.0)) for i in range(12)]
    assert all(sp.unk_id() not in e.written.tolist() for e in wide)  # every piece known
    new = {w for e in wide for w in _spoken(sp, e)} - base_words
    assert len(new) >= 8  # a name, city, team or thing in most of them


def _spoken(sp: spm.SentencePieceProcessor, example: Example) -> list[str]:
    return str(sp.decode(example.spoken[4:].tolist())).split()


def test_extending_the_tokenizer_keeps_every_id_and_writes_the_new_characters(
    tokenizer: bytes,
) -> None:
    before = spm.SentencePieceProcessor(model_proto=tokenizer)
    extended = extend_tokenizer(tokenizer, "@/@")
    after = spm.SentencePieceProcessor(model_proto=extended)
    check_tokenizer(extended)
    assert before.unk_id() in before.encode("anna@mail.com 05/27")
    assert after.unk_id() not in after.encode("anna@mail.com 05/27")
    assert after.decode(after.encode("anna@mail.com 05/27")) == "anna@mail.com 05/27"
    for text in ("Your balance is $42.50.", "thank you for calling"):
        assert after.encode(text) == before.encode(text)
    new = {after.piece_to_id(c) for c in "@/"}
    assert new == {len(live_ids(tokenizer)) - 6, len(live_ids(tokenizer)) - 5}  # first fillers
    assert set(live_ids(extended).tolist()) == set(live_ids(tokenizer).tolist()) | new
    assert extend_tokenizer(extended, "@/") == extended  # nothing left to add


def test_added_pieces_shorten_new_words_and_leave_trained_text_as_it_was(
    tokenizer: bytes,
) -> None:
    kept = ["Your balance is $42.50.", "thank you for calling", "Thank you for calling."]
    lines = ["the commemorative thermostat reshuffle", "thermostats and commemorations"] * 300
    extended = extend_pieces(tokenizer, iter(lines), 120, keep=kept)
    before = spm.SentencePieceProcessor(model_proto=tokenizer)
    after = spm.SentencePieceProcessor(model_proto=extended)
    check_tokenizer(extended)
    for text in kept:
        assert after.encode(text) == before.encode(text)
    new_word = "commemorative thermostat"
    assert len(after.encode(new_word)) < len(before.encode(new_word))
    assert after.decode(after.encode(new_word)) == new_word
    # The trained pieces keep their ids; the new ones take fillers' and join the live ids.
    for i in range(len(live_ids(tokenizer)) - 6):
        assert after.id_to_piece(i) == before.id_to_piece(i)
    assert len(live_ids(extended)) > len(live_ids(tokenizer))
    assert extend_pieces(extended, iter(lines), 120, keep=kept) == extended  # nothing to add


def test_an_open_example_needs_the_lexicon_and_says_open_words(tokenizer: bytes) -> None:
    from tools.demo_model.open_texts import Lexicon

    targets, front = Targets(tokenizer), frontend()
    with pytest.raises(ValueError, match="lexicon"):
        make_example(0, 3, targets, front, mix=Mix(open=1.0))
    sp = spm.SentencePieceProcessor(model_proto=tokenizer)
    base_words = {w for i in range(40) for w in _spoken(sp, make_example(i, 3, targets, front))}
    lexicon = Lexicon.load()
    examples = [
        make_example(i, 3, targets, front, mix=Mix(open=1.0), lexicon=lexicon) for i in range(8)
    ]
    new = {w for e in examples for w in _spoken(sp, e)} - base_words
    assert len(new) >= 8


def test_an_example_saying_a_benchmark_value_is_dropped_before_training(tokenizer: bytes) -> None:
    from tools.demo_model.dataset import without_held

    targets = Targets(tokenizer)

    def example(spoken: str) -> Example:
        ids = targets.ids(spoken, itn=False, music=False)
        return Example(np.zeros((4, 560), np.float16), ids, ids)

    kept = [example("the land is late"), example("call lis back"), example("the part")]
    held = [example("the parcel is late"), example("call lisa back")]
    held += [example("two parcels"), example("martinez")]  # most of the spelling
    assert [id(e) for e in without_held(kept + held, tokenizer)] == [id(e) for e in kept]


def test_a_data_set_can_ask_for_more_music_and_keeps_its_sentences(tokenizer: bytes) -> None:
    targets, front = Targets(tokenizer), frontend()
    sp = spm.SentencePieceProcessor(model_proto=tokenizer)

    def events(mix: Mix) -> list[str]:
        made = [make_example(i, 6, targets, front, mix=mix) for i in range(12)]
        return [sp.id_to_piece(int(e.spoken[2])) + sp.decode(e.spoken[4:].tolist()) for e in made]

    usual, always, never = events(Mix()), events(Mix(music=1.0)), events(Mix(music=0.0))
    assert all(e.startswith("<|BGM|>") for e in always)
    assert all(e.startswith("<|Speech|>") for e in never)
    assert any(e.startswith("<|Speech|>") for e in usual)
    # The share draws from the same stream whatever it is, so the sentences are the same.
    said = [[e.split("|>", 1)[1] for e in made] for made in (usual, always, never)]
    assert said[0] == said[1] == said[2]
