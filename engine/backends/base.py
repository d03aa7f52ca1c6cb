"""The small interface every inference backend implements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from engine.types import DecodeOptions


class Backend(Protocol):
    """Runs the encoder and CTC head on a batch and returns per-frame argmax ids."""

    @property
    def name(self) -> str:
        """A short label such as `onnx-int8-cpu`."""
        ...

    def run(
        self, feats: Sequence[np.ndarray], options: Sequence[DecodeOptions]
    ) -> list[np.ndarray]:
        """Decode one batch.

        `feats[i]` is a [T_i, 560] float32 feature matrix. The result's item i is an int32
        array of the argmax id of every encoder frame, prompt frames included, so its
        length is T_i + PROMPT_FRAMES. Padding never changes an item's result.
        """
        ...


@runtime_checkable
class AudioBackend(Backend, Protocol):
    """A backend that can also compute the features itself, on its device, from audio."""

    @property
    def takes_audio(self) -> bool:
        """True when `run_audio` is the path to use (its device computes features)."""
        ...

    def run_audio(
        self, audios: Sequence[np.ndarray], options: Sequence[DecodeOptions]
    ) -> list[np.ndarray]:
        """`run` for float32 mono audio at 16 kHz, each at least one analysis window long."""
        ...


@dataclass(frozen=True, slots=True)
class ScoredFrames:
    """One item's argmax ids, as `run` returns them, and the best candidates of each of
    its frames (the four prompt frames first), for biased decoding and confidence."""

    ids: np.ndarray  # [T + 4] int32
    topk_ids: np.ndarray  # [T + 4, K] int32, best first
    topk_logprobs: np.ndarray  # [T + 4, K] float32 log-probabilities, renormalised over the K


@runtime_checkable
class ScoringBackend(Backend, Protocol):
    """A backend that can also hand back each frame's best candidates."""

    def scoring_ready(self) -> bool:
        """Whether `run_scored` can run now (a backend may still be preparing for it)."""
        ...

    def run_scored(
        self, inputs: Sequence[np.ndarray], options: Sequence[DecodeOptions], *, audio: bool
    ) -> list[ScoredFrames]:
        """`run` (features) or, with `audio`, `run_audio` (raw audio), with candidates."""
        ...
