"""The live-vocabulary loss is funasr's loss when the dead rows are masked, and faster."""

from __future__ import annotations

import random

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
from tools.demo_model.training import VOCAB_SIZE, build_model, collate

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
