"""Fixtures of the decoding tests: a backend whose frames are planted, and the tiny model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from engine.backends.base import ScoredFrames
from engine.decoding.recognizer import Recognizer
from engine.model.directory import ModelDir, load_model_dir
from engine.model.network import TOPK
from engine.model.prompts import PROMPT_FRAMES
from engine.model.tokenizer import Tokenizer
from engine.types import DecodeOptions

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
