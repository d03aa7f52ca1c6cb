"""Hotwords through the Recognizer: a biased search where a request has them, greedy
decoding unchanged where it has none, also in the same batch; and the real backends'
scored outputs agree with their plain ones."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from engine.backends.base import ScoredFrames
from engine.backends.onnx import OnnxBackend
from engine.backends.registry import BackendOptions, create_backend, ensure_onnx
from engine.decoding.recognizer import Recognizer
from engine.model.directory import ModelDir, load_model_dir
from engine.model.network import TOPK
from engine.model.prompts import PROMPT_FRAMES
from engine.model.tokenizer import Tokenizer
from engine.types import DecodeOptions, Hotword
from tests.speech import Clip

PHRASE = "speech server"


class PlantedBackend:
    """Every utterance says other tokens, with the phrase's tokens each a close second.

    Frame 2k+1 of the speech prefers decoy k (log-probability -0.5) over the phrase's k-th
    token (-1.2); every other frame is blank. Greedy decoding writes the decoys; a boost
    of more than 0.7 a token writes the phrase.
    """

    name = "planted"

    def __init__(self, phrase: Sequence[int], decoys: Sequence[int]) -> None:
        self.phrase, self.decoys = list(phrase), list(decoys)
        self.scored_calls = 0
        self.ready = True

    def _frames(self, frames: int) -> ScoredFrames:
        # Blank first, then distinct unlikely fillers: a frame lists each id once.
        top_ids = np.tile(np.arange(TOPK, dtype=np.int32) + 20000, (frames, 1))
        top_lp = np.full((frames, TOPK), -30.0, np.float32)
        top_ids[:, 0], top_lp[:, 0] = 0, -0.01
        for k, (token, decoy) in enumerate(zip(self.phrase, self.decoys, strict=True)):
            t = 2 * k + 1
            top_ids[t, :3] = (decoy, token, 0)
            top_lp[t, :3] = (-0.5, -1.2, -2.0)
        # The prompt frames come first: a tag-free blank each, as sure as can be.
        prompt_ids = np.tile(np.arange(TOPK, dtype=np.int32) + 20000, (PROMPT_FRAMES, 1))
        prompt_ids[:, 0] = 0
        prompt_lp = np.full((PROMPT_FRAMES, TOPK), -30.0, np.float32)
        prompt_lp[:, 0] = 0.0
        top_ids, top_lp = np.concatenate([prompt_ids, top_ids]), np.concatenate([prompt_lp, top_lp])
        return ScoredFrames(top_ids[:, 0].copy(), top_ids, top_lp)

    def run(
        self, feats: Sequence[np.ndarray], options: Sequence[DecodeOptions]
    ) -> list[np.ndarray]:
        return [self._frames(f.shape[0]).ids for f in feats]

    def scoring_ready(self) -> bool:
        return self.ready

    def run_scored(
        self, inputs: Sequence[np.ndarray], options: Sequence[DecodeOptions], *, audio: bool
    ) -> list[ScoredFrames]:
        self.scored_calls += 1
        return [self._frames(f.shape[0]) for f in inputs]


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir: Path) -> ModelDir:
    return load_model_dir(tiny_model_dir)


@pytest.fixture
def planted(model_dir: ModelDir) -> tuple[Recognizer, PlantedBackend]:
    tokenizer = Tokenizer.from_file(model_dir.tokenizer_path)
    phrase = tokenizer.encode(PHRASE)
    decoys = tokenizer.encode("hello world there")[: len(phrase)]
    assert len(decoys) == len(phrase) and not set(decoys) & set(phrase)
    backend = PlantedBackend(phrase, decoys)
    return Recognizer(model_dir, backend), backend


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
