"""The small interface every inference backend implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

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
