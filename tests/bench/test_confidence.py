"""tools.bench.confidence's pure parts against hand-computed values: AUROC, ECE and the
reliability table, word grouping and labels, the word scores, the lowest frame posterior
and the Platt fit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.backends.base import ScoredFrames
from engine.decoding.ctc import CtcTokens
from tools.bench.confidence.accuracy import Decoded, min_frame_logprobs, utterance_score
from tools.bench.confidence.metrics import (
    METHODS,
    Word,
    auroc,
    average_ranks,
    ece,
    group_words,
    hypothesis_words,
    platt_apply,
    platt_fit,
    reliability,
    word_labels,
)


def test_average_ranks_share_ties() -> None:
    assert average_ranks([3.0, 1.0, 3.0, 2.0]).tolist() == [3.5, 1.0, 3.5, 2.0]


def test_auroc_counts_pairs_and_half_ties() -> None:
    assert auroc([0.9, 0.8, 0.3, 0.1], [True, True, False, False]) == 1.0
    assert auroc([0.1, 0.3, 0.8, 0.9], [True, True, False, False]) == 0.0
    # Positives 0.8, 0.4 against negatives 0.6, 0.4: 1 + 1 + 0 + 0.5 of 4 pairs.
    assert auroc([0.8, 0.4, 0.6, 0.4], [True, True, False, False]) == pytest.approx(0.625)
    assert auroc([0.5, 0.5], [True, False]) == 0.5
    assert auroc([0.5, 0.7], [True, True]) is None


def test_ece_weights_each_bins_gap_by_its_count() -> None:
    # Bin 0.9-1.0: confidence 0.95, accuracy 0.5; bin 0.1-0.2: 0.15 against 0.
    scores, right = [0.95, 0.95, 0.15, 0.15], [True, False, False, False]
    assert ece(scores, right) == pytest.approx(0.5 * 0.45 + 0.5 * 0.15)
    assert ece([1.0, 0.0], [True, False]) == 0.0  # the ends fall in the end bins
    assert ece([], []) is None


def test_reliability_lists_every_bin() -> None:
    rows = reliability([0.95, 0.95, 0.15, 1.0], [True, False, False, True])
    assert len(rows) == 10 and rows[0]["low"] == 0.0 and rows[9]["high"] == 1.0
    assert [r["count"] for r in rows] == [0, 1, 0, 0, 0, 0, 0, 0, 0, 3]
    assert rows[9]["mean_confidence"] == pytest.approx((0.95 + 0.95 + 1.0) / 3, abs=1e-4)
    assert rows[9]["accuracy"] == pytest.approx(2 / 3, abs=1e-4)
    assert rows[1]["accuracy"] == 0.0 and rows[0]["accuracy"] is None


def test_a_leading_space_starts_a_word() -> None:
    texts = [" our", " off", "ice", " in", " ", "4", "."]
    assert group_words(texts) == [("our", [0]), ("office", [1, 2]), ("in", [3]), ("4.", [4, 5, 6])]
    assert group_words(["he", "llo", " world"]) == [("hello", [0, 1]), ("world", [2])]
    assert group_words([]) == []


def test_hypothesis_words_are_normalised_and_keep_their_tokens_scores() -> None:
    texts = [" Hello", ",", " -", " World", "."]
    logprobs = [-0.1, -0.2, -0.3, -0.4, -0.5]
    frame_min = [-1.1, -1.2, -1.3, -1.4, -1.5]
    words = hypothesis_words(texts, logprobs, frame_min)
    # "-" normalises to nothing and is dropped, as WER drops it.
    assert words == [
        Word("hello", (-0.1, -0.2), (-1.1, -1.2)),
        Word("world", (-0.4, -0.5), (-1.4, -1.5)),
    ]


def test_word_labels_mark_matches_right_and_substitutions_and_insertions_wrong() -> None:
    # a=a, b->x substituted, c=c, e inserted, d->f substituted.
    labels = word_labels(["a", "b", "c", "d"], ["a", "x", "c", "e", "f"])
    assert labels == [True, False, True, False, False]
    assert word_labels(["a", "b", "c"], ["b", "c"]) == [True, True]  # a deleted
    assert word_labels([], ["a"]) == [False]
    assert word_labels(["a"], []) == []


def test_word_scores_by_each_method() -> None:
    word = Word("x", (math.log(0.5), math.log(0.8)), (math.log(0.4), math.log(0.7)))
    scores = {name: score(word) for name, score in METHODS.items()}
    assert scores == pytest.approx(
        {"min": 0.5, "mean": 0.65, "product": 0.4, "geo_mean": math.sqrt(0.4), "min_frame": 0.4}
    )


def test_an_utterance_without_words_scores_zero() -> None:
    empty = Decoded("held_out", ("a",), "", (), (), 0.0, 0.0, True)
    assert utterance_score(empty, "min", min) == 0.0
    assert not empty.error_free
    word = Word("a", (math.log(0.9),), (math.log(0.6),))
    one = Decoded("held_out", ("a",), "A.", (word,), (True,), 0.0, 0.0, True)
    assert one.error_free and utterance_score(one, "min_frame", min) == pytest.approx(0.6)


def test_min_frame_takes_each_tokens_lowest_frame() -> None:
    # Token 5 on frames 1-2, token 7 on frame 3, where it is not among the 2 candidates.
    ids = np.array([[1, 2], [5, 0], [5, 0], [0, 3]], dtype=np.int32)
    values = np.log(np.array([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.7, 0.3]], np.float32))
    frames = ScoredFrames(ids[:, 0], ids, values)
    got = min_frame_logprobs(CtcTokens((5, 7), (1, 3), (2, 3)), frames)
    assert np.exp(got) == pytest.approx([0.6, 0.3])  # token 7: the K-th candidate's


def test_platt_apply_and_fit() -> None:
    assert platt_apply([0.75], 1.0, 0.0) == pytest.approx([0.75])  # the identity
    assert platt_apply([0.5], 1.0, math.log(3)) == pytest.approx([0.75])
    assert platt_apply([0.75], 2.0, 0.0) == pytest.approx([0.9])  # odds 3 squared
    rng = np.random.default_rng(0)
    scores = rng.uniform(0.02, 0.98, 20000)
    right = rng.uniform(size=scores.size) < platt_apply(scores, 2.0, -0.5)
    a, b = platt_fit(scores, right)
    assert a == pytest.approx(2.0, abs=0.1) and b == pytest.approx(-0.5, abs=0.1)
