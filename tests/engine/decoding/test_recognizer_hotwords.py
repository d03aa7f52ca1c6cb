"""Hotwords through the Recognizer: a biased search where a request has them, greedy
decoding unchanged where it has none, also in the same batch; and the real backends'
scored outputs agree with their plain ones."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from engine.backends.onnx import OnnxBackend
from engine.backends.registry import BackendOptions, create_backend, ensure_onnx
from engine.decoding.recognizer import Recognizer
from engine.model.directory import ModelDir
from engine.model.network import TOPK
from engine.model.prompts import PROMPT_FRAMES
from engine.types import DecodeOptions, Hotword
from tests.engine.decoding.conftest import PHRASE, PlantedBackend
from tests.speech import Clip


def test_hotwords_bias_the_search_and_greedy_stays_for_the_rest(
    planted: tuple[Recognizer, PlantedBackend], speech_clips: list[Clip]
) -> None:
    recognizer, backend = planted
    audio = speech_clips[0].audio
    plain = recognizer.prepare(audio, DecodeOptions(itn=False))
    hot = recognizer.prepare(audio, DecodeOptions(itn=False, hotwords=(Hotword(PHRASE, 2.0),)))
    alone = recognizer.decode([plain])[0]
    assert backend.scored_calls == 0  # no hotwords in the batch: the plain run
    assert PHRASE not in alone.text
    together = recognizer.decode([plain, hot])
    assert backend.scored_calls == 1  # one run for the whole batch
    assert together[0] == alone  # the item without hotwords decodes exactly as before
    assert PHRASE in together[1].text
    weak = recognizer.prepare(audio, DecodeOptions(itn=False, hotwords=(Hotword(PHRASE, 0.5),)))
    assert PHRASE not in recognizer.decode([weak])[0].text  # 0.5 < 0.7 a token: no change


def test_the_biased_tokens_keep_their_times(
    planted: tuple[Recognizer, PlantedBackend], speech_clips: list[Clip]
) -> None:
    recognizer, _ = planted
    options = DecodeOptions(itn=False, hotwords=(Hotword(PHRASE, 2.0),))
    (result,) = recognizer.decode([recognizer.prepare(speech_clips[0].audio, options)])
    starts = [t.start_ms for t in result.tokens]
    assert starts == sorted(starts) and starts[0] == 60  # speech frame 1, 60 ms a frame


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_the_scored_run_agrees_with_the_plain_one(
    model_dir: ModelDir, speech_clips: list[Clip], backend: str
) -> None:
    real = create_backend(model_dir, BackendOptions(backend, "fp32", threads=2))
    if isinstance(real, OnnxBackend):
        assert real.wait_for_scoring(120)
    recognizer = Recognizer(model_dir, real)
    utts = [recognizer.prepare(c.audio, DecodeOptions()) for c in speech_clips[:3]]
    feats = [recognizer.features_of(u) for u in utts]
    plain = real.run(feats, [u.options for u in utts])
    scored = real.run_scored(feats, [u.options for u in utts], audio=False)  # type: ignore[attr-defined]
    for ids, out, f in zip(plain, scored, feats, strict=True):
        np.testing.assert_array_equal(out.ids, ids)
        frames = f.shape[0] + PROMPT_FRAMES  # the prompt frames are scored too
        assert out.topk_ids.shape == out.topk_logprobs.shape == (frames, TOPK)
        assert (np.diff(out.topk_logprobs, axis=1) <= 0).all() and (out.topk_logprobs <= 0).all()
        # The best candidate is the argmax, wherever the two best are not a near tie.
        clear = out.topk_logprobs[:, 0] - out.topk_logprobs[:, 1] > 1e-4
        np.testing.assert_array_equal(out.topk_ids[clear, 0], ids[clear])


def test_until_the_backend_can_score_hotwords_decode_greedily(
    planted: tuple[Recognizer, PlantedBackend], speech_clips: list[Clip]
) -> None:
    recognizer, backend = planted
    backend.ready = False  # e.g. ONNX Runtime still making its scored graph
    options = DecodeOptions(itn=False, hotwords=(Hotword(PHRASE, 2.0),))
    utt = recognizer.prepare(speech_clips[0].audio, options)
    plain = recognizer.decode([recognizer.prepare(speech_clips[0].audio, DecodeOptions(itn=False))])
    assert recognizer.decode([utt]) == plain and backend.scored_calls == 0
    backend.ready = True
    assert PHRASE in recognizer.decode([utt])[0].text


def test_onnx_makes_its_scored_graph_on_a_thread_of_its_own(model_dir: ModelDir) -> None:
    release = threading.Event()
    made: list[str] = []

    def slow_path() -> Path:
        release.wait(30)
        made.append(threading.current_thread().name)
        return ensure_onnx(model_dir, "fp32", scored=True)

    backend = OnnxBackend(
        model_dir, precision="fp32", onnx_path=ensure_onnx(model_dir, "fp32"), scored_path=slow_path
    )
    started = time.perf_counter()
    assert not backend.scoring_ready() and not backend.scoring_ready()  # asks once, waits never
    assert time.perf_counter() - started < 1.0
    release.set()
    assert backend.wait_for_scoring(120) and backend.scoring_ready()
    assert made == ["scored-graph"]  # made once, off the caller's thread
