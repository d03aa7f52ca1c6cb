"""The calibration and discrimination run (see the package's docstring)."""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.backends.base import ScoredFrames, ScoringBackend
from engine.backends.onnx import OnnxBackend
from engine.backends.registry import BackendOptions, create_backend
from engine.decoding.confidence import token_logprobs
from engine.decoding.ctc import CtcTokens, greedy_collapse
from engine.decoding.recognizer import Recognizer, Utterance
from engine.model.directory import load_model_dir
from engine.model.network import TOPK
from engine.types import FRAME_MS, DecodeOptions, Token
from tools.bench.common.output import machine
from tools.bench.confidence.metrics import (
    BINS,
    ECE_BAR,
    FITS,
    METHOD_NOTES,
    METHODS,
    SCORED,
    Word,
    auroc,
    ece,
    hypothesis_words,
    platt_apply,
    platt_fit,
    reliability,
    rounded,
    word_labels,
)
from tools.bench.hotwords import SCORED_WAIT_S, linked_model
from tools.demo_model import voices
from tools.demo_model.dataset import frontend
from tools.demo_model.evaluate import EvalItem, eval_sets, normalize, wer


@dataclass(frozen=True, slots=True)
class Engine:
    """A recognizer on one backend that can score, and how long its scored graph took."""

    recognizer: Recognizer
    scoring: ScoringBackend
    label: str
    scored_ready_s: float


@dataclass(frozen=True, slots=True)
class Decoded:
    """One utterance: its set, reference words, text, scored words and their labels, and
    the checks of the engine's scores against the second run's."""

    set_name: str
    reference: tuple[str, ...]
    text: str
    words: tuple[Word, ...]
    right: tuple[bool, ...]
    no_speech_prob: float
    logprob_gap: float  # largest |Token.logprob - token_logprobs of the second run|
    text_matches: bool  # the words, joined, are the normalised text

    @property
    def error_free(self) -> bool:
        return self.reference == tuple(w.text for w in self.words)


def open_engine(model: Path, backend: str, precision: str, threads: int) -> Engine:
    """The recognizer on `backend`, its scored graph ready (ONNX makes it on a thread)."""
    model_dir = load_model_dir(model)
    made = create_backend(model_dir, BackendOptions(backend, precision, threads=threads))
    if not isinstance(made, ScoringBackend):
        raise SystemExit(f"the {type(made).__name__} cannot score frames")
    t0 = time.perf_counter()
    if isinstance(made, OnnxBackend) and not made.wait_for_scoring(SCORED_WAIT_S):
        raise SystemExit("the scored graph could not be made (see the log)")
    ready_s = time.perf_counter() - t0
    recognizer = Recognizer(model_dir, made)
    if recognizer.features_on_device:
        raise SystemExit(f"{made.name} takes audio; this benchmark hands it features")
    check_frontend(recognizer)
    return Engine(recognizer, made, made.name, ready_s)


def check_frontend(recognizer: Recognizer) -> None:
    """The sets' features come from tools.demo_model's frontend: refuse a model whose own
    frontend would compute others."""
    audio = voices.speak("a short check", voices.UNSEEN[0])
    ours, theirs = recognizer.frontend.features(audio), frontend().features(audio)
    if ours.shape != theirs.shape or not np.allclose(ours, theirs, atol=1e-5):
        raise SystemExit("this model's frontend differs from the evaluation sets' features")


def utterance(item: EvalItem, options: DecodeOptions) -> Utterance:
    frames = int(item.feats.shape[0])
    return Utterance(item.feats, options, frames * FRAME_MS, frames)


def text_tokens(recognizer: Recognizer, ctc: CtcTokens) -> CtcTokens:
    """`ctc` less tags and control pieces: the tokens a transcript lists."""
    tags, tokenizer = recognizer.tags, recognizer.tokenizer
    keep = [k for k, i in enumerate(ctc.ids) if not (tags.is_tag(i) or tokenizer.is_control(i))]
    return CtcTokens(
        tuple(ctc.ids[k] for k in keep),
        tuple(ctc.first_frame[k] for k in keep),
        tuple(ctc.last_frame[k] for k in keep),
    )


def min_frame_logprobs(ctc: CtcTokens, frames: ScoredFrames) -> tuple[float, ...]:
    """Each token's lowest frame log-posterior over its run (a frame without the token among
    its candidates gives its K-th candidate's, as the engine's mean takes it)."""
    out = []
    for token, first, last in zip(ctc.ids, ctc.first_frame, ctc.last_frame, strict=True):
        ids = frames.topk_ids[first : last + 1]
        values = frames.topk_logprobs[first : last + 1]
        hit = ids == token
        found = values[np.arange(len(ids)), hit.argmax(axis=1)]
        out.append(float(np.where(hit.any(axis=1), found, values[:, -1]).min()))
    return tuple(out)


def scored_logprobs(tokens: Sequence[Token]) -> list[float]:
    """The tokens' log-probabilities; raises if the decode was not scored."""
    out = [t.logprob for t in tokens]
    if any(lp is None for lp in out):
        raise RuntimeError("a token has no log-probability: the scored graph did not run")
    return [float(lp) for lp in out if lp is not None]


def decode_item(engine: Engine, set_name: str, item: EvalItem) -> Decoded:
    """One utterance decoded with confidence, rescored for `min_frame`, and labelled."""
    transcript = engine.recognizer.decode([utterance(item, SCORED)])[0]
    frames = engine.scoring.run_scored([item.feats], [SCORED], audio=False)[0]
    ctc = text_tokens(engine.recognizer, greedy_collapse(frames.ids))
    if ctc.ids != tuple(t.id for t in transcript.tokens):
        raise RuntimeError(f"the second run's tokens differ: {item.sentence.written!r}")
    logprobs = scored_logprobs(transcript.tokens)
    gap = max(
        (abs(a - b) for a, b in zip(logprobs, token_logprobs(ctc, frames), strict=True)),
        default=0.0,
    )
    words = hypothesis_words(
        [t.text for t in transcript.tokens], logprobs, min_frame_logprobs(ctc, frames)
    )
    reference = tuple(normalize(item.sentence.written).split())
    hypothesis = [w.text for w in words]
    return Decoded(
        set_name,
        reference,
        transcript.text,
        tuple(words),
        tuple(word_labels(reference, hypothesis)),
        transcript.no_speech_prob or 0.0,
        gap,
        " ".join(hypothesis) == normalize(transcript.text),
    )


# ---------------------------------------------------------------- scoring


def word_arrays(decoded: Sequence[Decoded], method: str) -> tuple[np.ndarray, np.ndarray]:
    """Every word's score by `method`, and whether it is right."""
    score = METHODS[method]
    scores = [score(w) for d in decoded for w in d.words]
    right = [r for d in decoded for r in d.right]
    return np.asarray(scores, dtype=np.float64), np.asarray(right, dtype=bool)


def utterance_score(decoded: Decoded, method: str, pool: Callable[[list[float]], float]) -> float:
    """An utterance's score: `pool` of its words' scores (0 for no words at all)."""
    scores = [METHODS[method](w) for w in decoded.words]
    return pool(scores) if scores else 0.0


def word_row(decoded: Sequence[Decoded], method: str) -> dict[str, Any]:
    scores, right = word_arrays(decoded, method)
    return {
        "words": int(right.size),
        "wrong": int((~right).sum()),
        "auroc": rounded(auroc(scores, right)),
        "ece": rounded(ece(scores, right)),
        "mean_confidence": rounded(float(scores.mean())) if scores.size else None,
        "accuracy": rounded(float(right.mean())) if right.size else None,
    }


def by_set(decoded: Sequence[Decoded], sets: Sequence[str]) -> dict[str, list[Decoded]]:
    """The utterances of each set, and all of them as `pooled`."""
    groups = {name: [d for d in decoded if d.set_name == name] for name in sets}
    return groups | {"pooled": list(decoded)}


def method_table(decoded: Sequence[Decoded], sets: Sequence[str]) -> dict[str, Any]:
    """Per method, per set and pooled: words, wrong words, AUROC, ECE."""
    groups = by_set(decoded, sets)
    return {m: {name: word_row(group, m) for name, group in groups.items()} for m in METHODS}


def utterance_table(decoded: Sequence[Decoded], sets: Sequence[str]) -> dict[str, Any]:
    """Per method, per set and pooled: the AUROC of the utterance's mean (and lowest) word
    score for telling error-free utterances (positive) from those with any error."""
    table: dict[str, Any] = {}
    for m in METHODS:
        table[m] = {}
        for name, group in by_set(decoded, sets).items():
            free = [d.error_free for d in group]
            means = [utterance_score(d, m, statistics.fmean) for d in group]
            mins = [utterance_score(d, m, min) for d in group]
            table[m][name] = {
                "utterances": len(group),
                "error_free": sum(free),
                "auroc_mean_word": rounded(auroc(means, free)),
                "auroc_min_word": rounded(auroc(mins, free)),
            }
    return table


def bootstrap(decoded: Sequence[Decoded], best: str, reps: int, seed: int) -> dict[str, Any]:
    """95 % intervals of each method's pooled word AUROC, and of its difference from the
    best's, resampling utterances (their words together) with replacement."""
    rng = np.random.default_rng(seed)
    per = {m: [word_arrays([d], m) for d in decoded] for m in METHODS}
    draws: dict[str, list[float]] = {m: [] for m in METHODS}
    for _ in range(reps):
        pick = rng.integers(0, len(decoded), len(decoded))
        for m in METHODS:
            scores = np.concatenate([per[m][i][0] for i in pick])
            right = np.concatenate([per[m][i][1] for i in pick])
            draws[m].append(auroc(scores, right) or math.nan)
    best_draws = np.asarray(draws[best])
    out = {}
    for m, values in draws.items():
        a = np.asarray(values)
        out[m] = {
            "auroc_95": [rounded(float(q)) for q in np.nanpercentile(a, [2.5, 97.5])],
            "minus_best_95": [
                rounded(float(q)) for q in np.nanpercentile(a - best_draws, [2.5, 97.5])
            ],
        }
    return out


def platt_block(decoded: Sequence[Decoded], method: str, sets: Sequence[str]) -> dict[str, Any]:
    """Platt fits of `method`'s word scores, each on one set, evaluated on the others only."""
    groups = by_set(decoded, sets)
    block: dict[str, Any] = {}
    for fit_on, evaluated_on in FITS:
        if fit_on not in groups:
            continue
        a, b = platt_fit(*word_arrays(groups[fit_on], method))
        rows = {}
        for name in (n for n in evaluated_on if n in groups):
            scores, right = word_arrays(groups[name], method)
            fitted = platt_apply(scores, a, b)
            rows[name] = {
                "words": int(right.size),
                "ece_raw": rounded(ece(scores, right)),
                "ece_fitted": rounded(ece(fitted, right)),
                "reliability_fitted": reliability(fitted, right),
            }
        block[f"fitted_on_{fit_on}"] = {"a": round(a, 4), "b": round(b, 4), "evaluated_on": rows}
    return block


def set_summary(group: Sequence[Decoded], items: Sequence[EvalItem]) -> dict[str, Any]:
    """A set's size, WER (as evaluate.py computes it, ITN on) and error counts."""
    return {
        "utterances": len(group),
        "wer_itn": round(wer([i.sentence.written for i in items], [d.text for d in group]), 4),
        "reference_words": sum(len(d.reference) for d in group),
        "hypothesis_words": sum(len(d.words) for d in group),
        "wrong_words": sum(r is False for d in group for r in d.right),
        "error_free_utterances": sum(d.error_free for d in group),
        "no_speech_prob_median": rounded(statistics.median(d.no_speech_prob for d in group)),
    }


def error_rows(decoded: Sequence[Decoded], method: str) -> list[dict[str, Any]]:
    """The utterances with any error: reference, text, and each word, right or not, with
    its score by `method`."""
    return [
        {
            "set": d.set_name,
            "reference": " ".join(d.reference),
            "text": d.text,
            "words": [
                [w.text, r, round(METHODS[method](w), 4)]
                for w, r in zip(d.words, d.right, strict=True)
            ],
        }
        for d in decoded
        if not d.error_free
    ]


# ---------------------------------------------------------------- the calibration run


def best_method(table: dict[str, Any]) -> str:
    """The method with the highest pooled word AUROC (the first of equals)."""
    return max(METHODS, key=lambda m: table[m]["pooled"]["auroc"] or 0.0)


def calibration_report(
    args: Any, sets: dict[str, list[EvalItem]], decoded: list[Decoded], engine: Engine
) -> dict[str, Any]:
    """The result document of the default run."""
    names = list(sets)
    table = method_table(decoded, names)
    best = best_method(table)
    scores, right = word_arrays(decoded, best)
    pooled_ece = table[best]["pooled"]["ece"]
    return {
        "config": config(args, engine) | {"sets": {n: len(v) for n, v in sets.items()}},
        "machine": machine("cpus", "platform", "cpu", "python"),
        "sets": {n: set_summary(by_set(decoded, names)[n], sets[n]) for n in names},
        "checks": {
            "largest_logprob_gap": max(d.logprob_gap for d in decoded),
            "words_match_text": sum(d.text_matches for d in decoded) / len(decoded),
        },
        "methods": table,
        "bootstrap_pooled": bootstrap(decoded, best, args.bootstrap, args.seed),
        "best": {
            "method": best,
            "by": "pooled word AUROC",
            "auroc": table[best]["pooled"]["auroc"],
            "ece": pooled_ece,
            "reliability_pooled": reliability(scores, right),
        },
        "utterance_level": utterance_table(decoded, names),
        "platt": {
            "method": best,
            "raw_pooled_ece_over_0.10": pooled_ece is not None and pooled_ece > ECE_BAR,
            "note": "each fit uses one set's words and is evaluated only on the other sets",
            **platt_block(decoded, best, names),
        },
        "errors": error_rows(decoded, best),
    }


def config(args: Any, engine: Engine) -> dict[str, Any]:
    return {
        "model": str(args.model),
        "backend": engine.label,
        "precision": args.precision,
        "threads": args.threads,
        "language": SCORED.language,
        "itn": SCORED.itn,
        "seed": args.seed,
        "count": args.count,
        "bins": BINS,
        "bootstrap": args.bootstrap,
        "methods": METHOD_NOTES,
        "alignment": "jiwer.process_words on normalize()d words",
        "topk": TOPK,
    }


def run_calibration(args: Any) -> dict[str, Any]:
    """Decode every utterance of the sets with confidence and rate the methods."""
    sets = eval_sets(args.seed, args.count)
    with linked_model(args.model) as view:
        engine = open_engine(view, "onnx", args.precision, args.threads)
        decoded = [
            decode_item(engine, name, item) for name, items in sets.items() for item in items
        ]
        document = calibration_report(args, sets, decoded, engine)
    for method, rows in document["methods"].items():
        print(
            json.dumps({"method": method, **{k: [v["auroc"], v["ece"]] for k, v in rows.items()}})
        )
    return document
