"""Confidence: each token's log-posterior from the frames it was emitted on, the chance
of no speech from the language frame, and the Recognizer asking for them per request."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from engine.backends.base import ScoredFrames
from engine.backends.onnx import OnnxBackend
from engine.backends.registry import BackendOptions, create_backend
from engine.decoding.confidence import no_speech_prob, scores_of, token_logprobs
from engine.decoding.ctc import CtcTokens, greedy_collapse
from engine.decoding.recognizer import Recognizer
from engine.model.directory import load_model_dir
from engine.types import DecodeOptions, Hotword
from tests.engine.decoding.conftest import PHRASE, PlantedBackend
from tests.speech import Clip

K = 3


def frames(rows: list[list[tuple[int, float]]]) -> ScoredFrames:
    """Scored frames from each frame's (id, probability) candidates, best first."""
    ids = np.array([[i for i, _ in row] for row in rows], np.int32)
    lp = np.log(np.array([[p for _, p in row] for row in rows], np.float32))
    return ScoredFrames(ids[:, 0].copy(), ids, lp)


def test_a_token_scores_the_mean_log_posterior_of_the_frames_of_its_run() -> None:
    scored = frames(
        [
            [(0, 0.9), (7, 0.05), (8, 0.05)],
            [(7, 0.8), (0, 0.1), (8, 0.1)],
            [(7, 0.4), (8, 0.35), (0, 0.25)],
            [(0, 0.6), (8, 0.3), (7, 0.1)],
            [(8, 0.5), (0, 0.3), (7, 0.2)],
        ]
    )
    ctc = greedy_collapse(scored.ids)
    assert ctc.ids == (7, 8)
    logprobs = token_logprobs(ctc, scored)
    assert logprobs[0] == pytest.approx((math.log(0.8) + math.log(0.4)) / 2, abs=1e-6)
    assert logprobs[1] == pytest.approx(math.log(0.5), abs=1e-6)


def test_a_searched_token_outside_a_frames_candidates_gets_their_worst() -> None:
    # A biased search may emit 9 on frames where it is not among the K best.
    scored = frames([[(0, 0.7), (9, 0.2), (8, 0.1)], [(0, 0.6), (8, 0.3), (7, 0.1)]])
    searched = CtcTokens(ids=(9,), first_frame=(0,), last_frame=(1,))
    (logprob,) = token_logprobs(searched, scored)
    assert logprob == pytest.approx((math.log(0.2) + math.log(0.1)) / 2, abs=1e-6)


def test_no_speech_is_the_nospeech_tags_posterior_on_the_language_frame() -> None:
    scored = frames([[(4, 0.7), (13, 0.25), (0, 0.05)], [(0, 0.98), (1, 0.01), (2, 0.01)]])
    assert no_speech_prob(scored, 13) == pytest.approx(0.25, abs=1e-6)
    assert no_speech_prob(scored, 99) == 0.0  # not among the candidates
    assert no_speech_prob(scored, None) == 0.0  # a model without the tag
    assert scores_of(greedy_collapse(scored.ids), scored, 13).no_speech_prob == pytest.approx(
        0.25, abs=1e-6
    )


def test_a_request_that_asks_gets_its_tokens_logprobs_and_one_that_does_not_none(
    planted: tuple[Recognizer, PlantedBackend], speech_clips: list[Clip]
) -> None:
    recognizer, backend = planted
    audio = speech_clips[0].audio
    asks = recognizer.prepare(audio, DecodeOptions(itn=False, confidence=True))
    plain = recognizer.prepare(audio, DecodeOptions(itn=False))
    alone = recognizer.decode([plain])[0]
    assert backend.scored_calls == 0 and all(t.logprob is None for t in alone.tokens)
    scored, unscored = recognizer.decode([asks, plain])
    assert backend.scored_calls == 1  # one scored run for the whole batch
    assert scored.text == unscored.text == alone.text and scored.tokens
    assert [t.logprob for t in scored.tokens] == pytest.approx([-0.5] * len(scored.tokens))
    assert [t.confidence for t in scored.tokens] == pytest.approx(
        [math.exp(-0.5)] * len(scored.tokens)
    )
    assert scored.no_speech_prob == 0.0 and unscored.no_speech_prob is None
    assert unscored == alone  # the other request reads the same ids, unscored


def test_a_biased_token_is_scored_by_its_own_posterior(
    planted: tuple[Recognizer, PlantedBackend], speech_clips: list[Clip]
) -> None:
    recognizer, _ = planted
    options = DecodeOptions(itn=False, hotwords=(Hotword(PHRASE, 2.0),), confidence=True)
    (result,) = recognizer.decode([recognizer.prepare(speech_clips[0].audio, options)])
    assert PHRASE in result.text
    # The phrase's tokens were each a frame's second candidate, at -1.2.
    assert [t.logprob for t in result.tokens] == pytest.approx([-1.2] * len(result.tokens))


def test_until_the_backend_can_score_confidence_is_absent_and_the_text_unchanged(
    planted: tuple[Recognizer, PlantedBackend], speech_clips: list[Clip]
) -> None:
    recognizer, backend = planted
    backend.ready = False  # e.g. ONNX Runtime still making its scored graph
    asks = recognizer.prepare(speech_clips[0].audio, DecodeOptions(itn=False, confidence=True))
    (result,) = recognizer.decode([asks])
    assert backend.scored_calls == 0 and result.tokens
    assert all(t.logprob is None for t in result.tokens) and result.no_speech_prob is None


@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_real_backends_score_the_demo_models_words_without_changing_them(
    demo_model: Path, speech_clips: list[Clip], backend: str
) -> None:
    model_dir = load_model_dir(demo_model)
    precision = "int8" if backend == "onnx" else "fp32"
    real = create_backend(model_dir, BackendOptions(backend, precision, threads=2))
    if isinstance(real, OnnxBackend):
        assert real.wait_for_scoring(120)
    recognizer = Recognizer(model_dir, real)
    for clip in speech_clips[:2]:
        plain = recognizer.decode([recognizer.prepare(clip.audio, DecodeOptions())])[0]
        asks = DecodeOptions(confidence=True)
        scored = recognizer.decode([recognizer.prepare(clip.audio, asks)])[0]
        assert scored.text == plain.text and len(scored.tokens) == len(plain.tokens) > 0
        logprobs = [t.logprob for t in scored.tokens]
        assert all(lp is not None and -30 < lp <= 0 for lp in logprobs), logprobs
        assert scored.no_speech_prob is not None and 0 <= scored.no_speech_prob <= 1


def test_an_onnx_backend_that_serves_the_scored_graph_holds_one_session(
    tiny_model_dir: Path, speech_clips: list[Clip]
) -> None:
    model_dir = load_model_dir(tiny_model_dir)
    both = create_backend(model_dir, BackendOptions("onnx", "fp32", threads=2, scored=True))
    plain = create_backend(model_dir, BackendOptions("onnx", "fp32", threads=2))
    assert isinstance(both, OnnxBackend) and isinstance(plain, OnnxBackend)
    assert both.scoring_ready()  # from the start: nothing more to make or open
    assert both._scored.session is both._session  # the weights held once
    recognizer = Recognizer(model_dir, both)
    utts = [recognizer.prepare(c.audio, DecodeOptions()) for c in speech_clips[:2]]
    feats = [recognizer.features_of(u) for u in utts]
    options = [u.options for u in utts]
    for served, reference in zip(both.run(feats, options), plain.run(feats, options), strict=True):
        np.testing.assert_array_equal(served, reference)
    for scored, reference in zip(
        both.run_scored(feats, options, audio=False), plain.run(feats, options), strict=True
    ):
        np.testing.assert_array_equal(scored.ids, reference)
