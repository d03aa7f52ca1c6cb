"""Scoring the scores: each way of making a word's confidence from its tokens', the
labels of right and wrong words, AUROC, ECE, reliability and a Platt fit."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jiwer
import numpy as np
import numpy.typing as npt

from engine.types import DecodeOptions
from tools.demo_model.evaluate import normalize

#: What every scored decode asks for: language auto, ITN on, confidence.
SCORED = DecodeOptions(confidence=True)
PLAIN = DecodeOptions()
BINS = 10
#: The raw ECE above which the scores count as badly calibrated.
ECE_BAR = 0.10
#: Each Platt fit: the set it is fitted on, then the sets it is evaluated on.
FITS = (("held_out", ("unseen_voice", "music")), ("unseen_voice", ("held_out", "music")))
#: The cost part's backends, and the length of its utterances (seconds).
COST_BACKENDS = (("onnx", "int8"), ("torch", "fp32"))
COST_SECONDS = (3.0, 6.0)
DEFAULT_FULL_MODEL = Path("~/.cache/sensestream/models/test-full")


@dataclass(frozen=True, slots=True)
class Word:
    """A normalised hypothesis word, its tokens' log-probabilities as the engine gives them
    (each the mean over its run of frames), and each token's lowest frame log-probability."""

    text: str
    logprobs: tuple[float, ...]
    frame_min: tuple[float, ...]


def word_min(word: Word) -> float:
    return math.exp(min(word.logprobs))


def word_mean(word: Word) -> float:
    return sum(math.exp(lp) for lp in word.logprobs) / len(word.logprobs)


def word_product(word: Word) -> float:
    return math.exp(sum(word.logprobs))


def word_geo_mean(word: Word) -> float:
    return math.exp(sum(word.logprobs) / len(word.logprobs))


def word_min_frame(word: Word) -> float:
    return math.exp(min(word.frame_min))


METHODS: dict[str, Callable[[Word], float]] = {
    "min": word_min,
    "mean": word_mean,
    "product": word_product,
    "geo_mean": word_geo_mean,
    "min_frame": word_min_frame,
}
METHOD_NOTES = {
    "min": "the lowest of its tokens' confidences (Token.confidence)",
    "mean": "the mean of its tokens' confidences",
    "product": "the product of its tokens' confidences",
    "geo_mean": "the geometric mean of its tokens' confidences",
    "min_frame": "the lowest frame posterior over all its tokens' frames (not the engine's)",
}


# ---------------------------------------------------------------- pure parts (tested)


def group_words(texts: Sequence[str]) -> list[tuple[str, list[int]]]:
    """Tokens joined into words, as (text, token indices): a token whose text starts with a
    space starts a word (a lone space too: the token after it joins its word)."""
    words: list[tuple[str, list[int]]] = []
    for i, text in enumerate(texts):
        if words and not text[:1].isspace():
            joined, indices = words[-1]
            words[-1] = (joined + text, [*indices, i])
        else:
            words.append((text.strip(), [i]))
    return words


def hypothesis_words(
    texts: Sequence[str], logprobs: Sequence[float], frame_min: Sequence[float]
) -> list[Word]:
    """The normalised words of a decode's tokens (a word that normalises to nothing, bare
    punctuation, is dropped, as WER drops it), each with its tokens' scores."""
    out: list[Word] = []
    for text, indices in group_words(texts):
        lps = tuple(logprobs[i] for i in indices)
        mins = tuple(frame_min[i] for i in indices)
        out.extend(Word(w, lps, mins) for w in normalize(text).split())
    return out


def word_labels(reference: Sequence[str], hypothesis: Sequence[str]) -> list[bool]:
    """Whether each hypothesis word is right: matched to an equal reference word by a
    Levenshtein alignment (jiwer's), rather than substituted or inserted."""
    right = [False] * len(hypothesis)
    if not reference or not hypothesis:
        return right  # all insertions, or nothing to label
    aligned = jiwer.process_words(" ".join(reference), " ".join(hypothesis))
    for chunk in aligned.alignments[0]:
        if chunk.type == "equal":
            for k in range(chunk.hyp_start_idx, chunk.hyp_end_idx):
                right[k] = True
    return right


def average_ranks(values: npt.ArrayLike) -> np.ndarray:
    """1-based ranks, tied values sharing the mean of their ranks."""
    _, inverse, counts = np.unique(np.asarray(values), return_inverse=True, return_counts=True)
    last = np.cumsum(counts)
    return np.asarray((last - (counts - 1) / 2)[inverse], dtype=np.float64)


def auroc(scores: npt.ArrayLike, positive: npt.ArrayLike) -> float | None:
    """The chance that a random positive scores above a random negative (a tie counts half):
    the area under the ROC curve; None without both kinds."""
    y = np.asarray(positive, dtype=bool)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = average_ranks(np.asarray(scores, dtype=np.float64))
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def bin_of(scores: np.ndarray, bins: int) -> np.ndarray:
    """Each score's equal-width bin over [0, 1] (1.0 in the last)."""
    return np.asarray(np.minimum((np.clip(scores, 0.0, 1.0) * bins).astype(np.int64), bins - 1))


def bin_stats(
    scores: npt.ArrayLike, right: npt.ArrayLike, bins: int = BINS
) -> list[tuple[int, float | None, float | None]]:
    """Per equal-width bin: count, mean confidence and accuracy (None for an empty bin)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(right, dtype=np.float64)
    which = bin_of(s, bins)
    out: list[tuple[int, float | None, float | None]] = []
    for b in range(bins):
        inside = which == b
        n = int(inside.sum())
        out.append((n, float(s[inside].mean()), float(y[inside].mean())) if n else (0, None, None))
    return out


def reliability(
    scores: npt.ArrayLike, right: npt.ArrayLike, bins: int = BINS
) -> list[dict[str, Any]]:
    """The reliability table: each bin's range, count, mean confidence and accuracy."""
    return [
        {
            "low": round(b / bins, 4),
            "high": round((b + 1) / bins, 4),
            "count": n,
            "mean_confidence": rounded(confidence),
            "accuracy": rounded(accuracy),
        }
        for b, (n, confidence, accuracy) in enumerate(bin_stats(scores, right, bins))
    ]


def ece(scores: npt.ArrayLike, right: npt.ArrayLike, bins: int = BINS) -> float | None:
    """Expected calibration error: the count-weighted mean, over equal-width bins, of the
    gap between mean confidence and accuracy; None for no scores."""
    stats = bin_stats(scores, right, bins)
    total = sum(n for n, _, _ in stats)
    if total == 0:
        return None
    return sum(n * abs(c - a) for n, c, a in stats if c is not None and a is not None) / total


def logit(scores: npt.ArrayLike, eps: float = 1e-6) -> np.ndarray:
    p = np.clip(np.asarray(scores, dtype=np.float64), eps, 1 - eps)
    return np.asarray(np.log(p) - np.log1p(-p))


def platt_apply(scores: npt.ArrayLike, a: float, b: float) -> np.ndarray:
    """sigmoid(a * logit(score) + b)."""
    return np.asarray(1 / (1 + np.exp(-(a * logit(scores) + b))))


def platt_fit(
    scores: npt.ArrayLike, right: npt.ArrayLike, ridge: float = 1e-3
) -> tuple[float, float]:
    """(a, b) of `platt_apply` by maximum likelihood (Newton's method), with a small ridge
    towards the identity (a = 1, b = 0) so that separable data still has an answer."""
    x, y = logit(scores), np.asarray(right, dtype=np.float64)
    theta = np.array([1.0, 0.0])
    for _ in range(100):
        p = 1 / (1 + np.exp(-(theta[0] * x + theta[1])))
        w = p * (1 - p)
        grad = np.array([((p - y) * x).sum(), (p - y).sum()]) + ridge * (theta - [1.0, 0.0])
        hess = np.array([[(w * x * x).sum(), (w * x).sum()], [(w * x).sum(), w.sum()]])
        step = np.linalg.solve(hess + ridge * np.eye(2), grad)
        theta -= step
        if np.abs(step).max() < 1e-10:
            break
    return float(theta[0]), float(theta[1])
