"""The training loop: its schedule, its batches, its loss going down, and resuming."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from tools.demo_model.dataset import Example
from tools.demo_model.training import (
    ENCODER_CONF,
    TrainConfig,
    Trainer,
    batches,
    collate,
    learning_rate,
)

#: The demo architecture, shrunk so a test trains it in seconds.
SMALL = {**ENCODER_CONF, "output_size": 32, "attention_heads": 2, "linear_units": 64}
SMALL |= {"num_blocks": 1, "tp_blocks": 1}


def examples(count: int, seed: int = 0) -> list[Example]:
    """Made-up examples whose targets follow the features, so the model can learn them."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        frames = int(rng.integers(20, 60))
        label = int(rng.integers(3, 9))
        feats = rng.standard_normal((frames, 560)).astype(np.float16)
        feats[:, :50] += label  # the label is visible in the features
        tags = [24885, 25004, 24993, 25017]
        text = np.asarray(tags + [label] * 3, np.int32)
        out.append(Example(feats, text, text))
    return out


def test_the_rate_warms_up_holds_then_falls_to_a_tenth() -> None:
    config = TrainConfig(steps=1000, lr=1e-3, warmup=100, decay_from=0.8)
    assert learning_rate(0, config) == pytest.approx(1e-5)
    assert learning_rate(99, config) == pytest.approx(1e-3)
    assert learning_rate(500, config) == pytest.approx(1e-3)
    assert learning_rate(900, config) == pytest.approx(0.55e-3)
    assert learning_rate(1000, config) == pytest.approx(1e-4)


def test_an_epoch_of_batches_covers_every_example_once_in_similar_lengths() -> None:
    data = examples(100)
    epoch = list(batches(data, TrainConfig(batch=8), 0))
    assert sorted(i for b in epoch for i in b) == list(range(100))
    assert epoch != list(batches(data, TrainConfig(batch=8), 1))  # reshuffled per epoch


def test_collate_pads_features_with_zeros_and_targets_with_minus_one() -> None:
    data = examples(3)
    speech, lengths, text, text_lengths = collate(data, random.Random(0), 0.5)
    assert speech.shape == (3, max(len(e.feats) for e in data), 560)
    assert lengths.tolist() == [len(e.feats) for e in data]
    assert (text[:, 7:] == -1).all() and text_lengths.tolist() == [7, 7, 7]


def test_training_lowers_the_loss_and_resumes_where_it_stopped(tmp_path: Path) -> None:
    data = examples(64)
    config = TrainConfig(steps=12, batch=16, lr=3e-3, warmup=2, checkpoint_every=4, threads=2)
    Trainer(tmp_path, config, SMALL).run(data, lambda step: {})
    log = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, 13))
    assert np.mean([r["loss"] for r in log[-3:]]) < np.mean([r["loss"] for r in log[:3]])

    resumed = Trainer(tmp_path, dataclasses.replace(config, steps=14), SMALL)
    assert resumed.step == 12
    resumed.run(data, lambda step: {})
    log = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log][-2:] == [13, 14]


def test_frozen_blocks_keep_their_weights_while_the_rest_learns(tmp_path: Path) -> None:
    config = TrainConfig(steps=4, batch=16, lr=3e-3, warmup=1, threads=2, frozen_blocks=1)
    trainer = Trainer(tmp_path, config, SMALL)
    encoder = trainer.model.encoder
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.run(examples(32), lambda step: {})
    moved = {n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])}
    assert not any(name.startswith("encoder.encoders0.") for name in moved)
    assert any(name.startswith("encoder.tp_encoders.") for name in moved)
    assert "ctc.ctc_lo.weight" in moved
    # A resumed run keeps them frozen too: the freezing is the run's, not the checkpoint's.
    resumed = Trainer(tmp_path, dataclasses.replace(config, steps=6), SMALL)
    resumed.run(examples(32), lambda step: {})
    kept = resumed.model.encoder.encoders0.state_dict()
    assert all(torch.equal(v, encoder.encoders0.state_dict()[k]) for k, v in kept.items())
    with pytest.raises(ValueError, match="frozen blocks"):
        Trainer(tmp_path / "other", dataclasses.replace(config, frozen_blocks=3), SMALL)


def test_a_run_can_stop_early_and_move_to_other_data_as_a_new_epoch(tmp_path: Path) -> None:
    config = TrainConfig(steps=10, batch=16, warmup=2, checkpoint_every=2, threads=2)
    first = Trainer(tmp_path, config, SMALL)
    first.run(examples(32), lambda step: {}, data="easy", until=4)
    assert (first.step, first.data) == (4, "easy")
    later = Trainer(tmp_path, config, SMALL)
    assert (later.step, later.data, later.epoch) == (4, "easy", first.epoch)
    later.run(examples(48, seed=1), lambda step: {}, data="full", until=6)
    assert (later.step, later.data, later.epoch, later.epoch_start) == (6, "full", 0, 4)


def test_a_run_killed_between_checkpoints_logs_each_step_once(tmp_path: Path) -> None:
    config = TrainConfig(steps=8, batch=16, warmup=2, checkpoint_every=3, threads=2)
    Trainer(tmp_path, config, SMALL).run(examples(32), lambda step: {}, until=5)
    # As if killed after step 7 was logged and before its checkpoint at step 9.
    with (tmp_path / "train.jsonl").open("a") as log:
        log.writelines(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in (6, 7))
    resumed = Trainer(tmp_path, config, SMALL)
    resumed.run(examples(32), lambda step: {})
    log = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, 9))


def test_replay_shards_join_the_training_data_under_a_name_of_their_own(tmp_path: Path) -> None:
    from tools.demo_model import cli
    from tools.demo_model.dataset import write_shard

    tok = (Path("models/demo") / "chn_jpn_yue_eng_ko_spectok.bpe.model").read_bytes()
    for folder in ("shards", "shards-replay", "shards-clean"):
        (tmp_path / folder).mkdir()
    write_shard(tmp_path / "shards" / "shard-0000.npz", examples(3, seed=1))
    found, name, dropped = cli.training_examples(tmp_path, False, tok)
    assert (len(found), name, dropped) == (3, "shards", 0)
    write_shard(tmp_path / "shards-replay" / "shard-0000.npz", examples(2, seed=2))
    found, name, _ = cli.training_examples(tmp_path, False, tok)
    assert (len(found), name) == (5, "shards+shards-replay")  # a new epoch begins
    assert any(np.array_equal(e.feats, examples(2, seed=2)[1].feats) for e in found)
    # The easy set of a curriculum's first part is trained on alone.
    write_shard(tmp_path / "shards-clean" / "shard-0000.npz", examples(1))
    assert cli.training_examples(tmp_path, True, tok)[1] == "shards-clean"
