"""The live-vocabulary loss is funasr's loss when the dead rows are masked, and faster."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from tests.tools.demo_model.test_training import SMALL, examples
from tools.demo_model.dataset import TAG_PIECES, train_tokenizer
from tools.demo_model.loss import (
    DEAD_BIAS,
    LiveVocabLoss,
    live_ids,
    mask_dead_rows,
    revive_rows,
)
from tools.demo_model.training import VOCAB_SIZE, TrainConfig, Trainer, build_model, collate

#: The test examples' pieces: labels 3..8 and their four tags (blank 0 too).
LIVE = torch.tensor([0, *range(3, 9), 24885, 24993, 25004, 25017])


def test_live_ids_are_the_trained_pieces_and_the_tags_not_the_padding() -> None:
    import sentencepiece as spm

    tokenizer = train_tokenizer(count=300, vocab=150)
    live = live_ids(tokenizer)
    sp = spm.SentencePieceProcessor(model_proto=tokenizer)
    assert live[0] == 0 and torch.equal(live, live.sort().values)
    assert {sp.piece_to_id(p) for p in TAG_PIECES} <= set(live.tolist())
    assert sp.id_to_piece(int(live[-len(TAG_PIECES) - 1])) != "▁w150"  # a filler
    assert 150 < len(live) < 160
    for text in ("your order number is 42", "thank you for calling"):
        assert set(sp.encode(text)) <= set(live.tolist())


def test_it_equals_funasr_forward_on_a_model_whose_dead_rows_are_masked() -> None:
    torch.manual_seed(0)
    model = build_model(SMALL)
    model.load_state_dict(mask_dead_rows(model.state_dict(), LIVE))
    model.eval()
    batch = collate(examples(6), random.Random(0), 0.5)
    with torch.no_grad():
        torch.manual_seed(1)  # encode() draws which prompts become `auto`
        full, stats, _ = model(batch[0], batch[1].clone(), batch[2], batch[3])
        torch.manual_seed(1)
        mine, mine_stats = LiveVocabLoss(LIVE, VOCAB_SIZE)(model, *batch)
    assert float(mine) == pytest.approx(float(full), rel=1e-4)
    assert mine_stats["loss_ctc"] == pytest.approx(float(stats["loss_ctc"]), rel=1e-4)
    assert mine_stats["acc_rich"] == pytest.approx(float(stats["acc_rich"]))


def test_a_target_outside_the_live_rows_is_an_error_not_a_silent_wrong_id() -> None:
    model = build_model(SMALL)
    batch = collate(examples(2), random.Random(0), 0.5)
    with pytest.raises(ValueError, match="outside the live vocabulary"):
        LiveVocabLoss(LIVE[batch[2][0, 4] != LIVE], VOCAB_SIZE)(model, *batch)


def test_masking_leaves_live_rows_and_sinks_the_rest() -> None:
    state = build_model(SMALL).state_dict()
    masked = mask_dead_rows(state, LIVE)
    bias, weight = masked["ctc.ctc_lo.bias"], masked["ctc.ctc_lo.weight"]
    assert torch.equal(bias[LIVE], state["ctc.ctc_lo.bias"][LIVE])
    assert torch.equal(weight[LIVE], state["ctc.ctc_lo.weight"][LIVE])
    assert bias[1] == DEAD_BIAS and bias[20000] == DEAD_BIAS and not weight[20000].any()
    assert state["ctc.ctc_lo.bias"][1] != DEAD_BIAS  # the given state is left as it was


def test_reviving_sets_masked_live_rows_like_the_trained_ones_and_leaves_the_rest() -> None:
    state = mask_dead_rows(build_model(SMALL).state_dict(), LIVE)
    grown = torch.cat([LIVE[:-4], torch.tensor([9, 10]), LIVE[-4:]])  # two new pieces
    revived = revive_rows(state, grown)
    bias, weight = revived["ctc.ctc_lo.bias"], revived["ctc.ctc_lo.weight"]
    assert torch.equal(bias[LIVE], state["ctc.ctc_lo.bias"][LIVE])
    assert torch.equal(weight[LIVE], state["ctc.ctc_lo.weight"][LIVE])
    trained = state["ctc.ctc_lo.bias"][LIVE]
    assert bias[9] == pytest.approx(float(trained.mean())) and bias[10] == bias[9]
    assert weight[9].std() > 0 and not torch.equal(weight[9], weight[10])
    assert bias[11] == DEAD_BIAS and not weight[11].any()  # not live: still dead
    assert revive_rows(state, LIVE) is state  # nothing masked among the live rows


def _batch(count: int) -> tuple[torch.Tensor, ...]:
    return collate(examples(count), random.Random(0), 0.5)


def test_a_teacher_like_the_model_adds_nothing_even_where_prompts_are_drawn() -> None:
    torch.manual_seed(0)
    model = build_model(SMALL).eval()
    twin = build_model(SMALL)
    twin.load_state_dict(model.state_dict())
    batch = _batch(12)  # twelve draws of `auto` or not: the teacher must draw the same
    torch.manual_seed(3)
    plain, _ = LiveVocabLoss(LIVE, VOCAB_SIZE)(model, *batch)
    torch.manual_seed(3)
    guided, stats = LiveVocabLoss(LIVE, VOCAB_SIZE, twin, distill=5.0)(model, *batch)
    assert stats["loss_distill"] == pytest.approx(0.0, abs=1e-5)
    assert float(guided) == pytest.approx(float(plain), rel=1e-5)


def test_a_different_teacher_pulls_the_model_and_is_not_trained() -> None:
    torch.manual_seed(0)
    model, teacher = build_model(SMALL), build_model(SMALL)
    batch = _batch(6)
    loss = LiveVocabLoss(LIVE, VOCAB_SIZE, teacher, distill=1.0)
    total, stats = loss(model, *batch)
    assert stats["loss_distill"] > 0.01
    assert float(total) == pytest.approx(
        stats["loss_ctc"] + stats["loss_rich"] + stats["loss_distill"], rel=1e-4
    )
    total.backward()
    assert all(p.grad is None for p in teacher.parameters())
    assert model.ctc.ctc_lo.weight.grad is not None

    # With a heavy weight, steps on the loss bring the model's posteriors to the teacher's.
    heavy = LiveVocabLoss(LIVE, VOCAB_SIZE, teacher, distill=100.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.eval()  # no dropout: the same frames each step
    seen = []
    for _ in range(30):
        torch.manual_seed(5)
        total, stats = heavy(model, *batch)
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
        seen.append(stats["loss_distill"])
    assert seen[-1] < seen[0] / 3


class SpellingTeacher(torch.nn.Module):
    """A teacher whose greedy decode is each target (every piece twice, then a blank) for
    the utterances in `right`, and the target less its last piece for the rest."""

    def __init__(self, right: set[int]) -> None:
        super().__init__()
        self.right = right
        self.ctc = torch.nn.Module()
        self.ctc.ctc_lo = torch.nn.Linear(len(LIVE), VOCAB_SIZE)
        with torch.no_grad():
            self.ctc.ctc_lo.weight.zero_()
            self.ctc.ctc_lo.bias.zero_()
            self.ctc.ctc_lo.weight[LIVE, torch.arange(len(LIVE))] = 20.0

    def encode(
        self, speech: torch.Tensor, lengths: torch.Tensor, text: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out = torch.zeros(len(speech), 4 + speech.size(1), len(LIVE))
        out[:, :, 0] = 1.0  # blank everywhere but where a piece is said
        local = {int(piece): row for row, piece in enumerate(LIVE)}
        for i, row in enumerate(text):
            said = [local[int(t)] for t in row[4:] if t >= 0]
            said = said if i in self.right else said[:-1]
            for k, piece in enumerate(said):
                out[i, 4 + 3 * k : 6 + 3 * k] = torch.nn.functional.one_hot(
                    torch.tensor(piece), len(LIVE)
                ).float()
        return out, lengths + 4


def _distill(where: str, teacher: torch.nn.Module, model: torch.nn.Module) -> dict[str, float]:
    torch.manual_seed(4)
    return LiveVocabLoss(LIVE, VOCAB_SIZE, teacher, 1.0, where)(model, *_batch(6))[1]


def test_kept_where_right_weighs_only_the_utterances_the_teacher_decodes() -> None:
    torch.manual_seed(0)
    model = build_model(SMALL).eval()
    everywhere = _distill("all", SpellingTeacher(right=set()), model)
    assert everywhere["distilled"] == 1.0 and everywhere["loss_distill"] > 0.01
    # Right on none: nothing is kept. Right on all: the same as keeping it everywhere.
    assert _distill("right", SpellingTeacher(right=set()), model)["loss_distill"] == 0.0
    whole = _distill("right", SpellingTeacher(right=set(range(6))), model)
    assert whole["distilled"] == 1.0
    assert whole["loss_distill"] == pytest.approx(
        _distill("all", SpellingTeacher(right=set(range(6))), model)["loss_distill"], rel=1e-6
    )
    # Right on two (their targets repeat a piece, so the decode must collapse frames and
    # keep the blank-separated repeats): a third of the batch, and a part of the whole.
    some = _distill("right", SpellingTeacher(right={0, 3}), model)
    assert some["distilled"] == pytest.approx(2 / 6)
    assert 0.0 < some["loss_distill"] < whole["loss_distill"]


def test_distilling_where_is_one_of_the_known_scopes() -> None:
    with pytest.raises(ValueError, match="distill where"):
        LiveVocabLoss(LIVE, VOCAB_SIZE, build_model(SMALL), 1.0, "music")


def test_a_run_with_a_teacher_logs_its_distance_and_needs_the_live_loss(tmp_path: Path) -> None:
    teacher = build_model(SMALL)
    config = TrainConfig(steps=2, batch=8, warmup=1, threads=2, distill=0.5)
    Trainer(tmp_path, config, SMALL, live=LIVE, teacher=teacher).run(examples(16), lambda s: {})
    steps = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert len(steps) == 2 and all(step["loss_distill"] > 0 for step in steps)
    assert all(step["distilled"] == 1.0 for step in steps)  # kept on all, the default
    with pytest.raises(ValueError, match="live-vocabulary"):
        Trainer(tmp_path / "other", config, SMALL, teacher=teacher)
