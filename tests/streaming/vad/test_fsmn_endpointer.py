"""The lean endpointer's overrides make exactly funasr's state changes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from streaming.vad.fsmn import _funasr_onnx_leaf, _read_config, package_model_dir
from streaming.vad.fsmn_endpointer import lean_endpointer


def endpointers() -> tuple[Any, Any]:
    module = _funasr_onnx_leaf("e2e_vad")
    conf = _read_config(package_model_dir())["model_conf"]
    return module.E2EVadModel(conf), lean_endpointer(module)(conf)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sizes", [(1600, 1600, 1600), (399, 400, 401, 560, 7, 0, 3200)])
def test_frame_energies_are_funasrs_floats(sizes: tuple[int, ...], dtype: type) -> None:
    rng = np.random.default_rng(len(sizes))
    reference, ours = endpointers()
    for size in sizes:
        # Quiet and loud stretches both: the 1e-6 floor matters only in digital silence.
        wave = (rng.standard_normal(size) * rng.choice([0.0, 1e-4, 0.3])).astype(dtype)
        for scorer in (reference, ours):
            scorer.waveform = wave[np.newaxis]
            scorer.ComputeDecibel()
        assert ours.decibel == reference.decibel
        assert (ours.data_buf_all_size, ours.data_buf_size) == (
            reference.data_buf_all_size,
            reference.data_buf_size,
        )
    assert len(reference.decibel) > 0
