"""A CPU session gives back what a large batch took: the arena is shrunk after each run."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np

from engine.backends.onnx import OnnxBackend
from engine.backends.registry import ensure_onnx
from engine.model.directory import load_model_dir
from engine.types import DecodeOptions


def resident_mib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def growth_after_a_large_batch(model_path: str) -> int:
    """MiB the process still holds after a large batch, over what it held before it."""
    model_dir = load_model_dir(Path(model_path))
    backend = OnnxBackend(model_dir, precision="fp32", onnx_path=ensure_onnx(model_dir, "fp32"))
    rng = np.random.default_rng(0)
    # 4 x 90 s: about 1.4 GB of activations (attention over 1500 frames) at its peak.
    feats = [rng.standard_normal((1500, 560)).astype(np.float32) for _ in range(4)]
    backend.run(feats[:1], [DecodeOptions()])  # the runtime's first-call set-up
    before = resident_mib()
    backend.run(feats, [DecodeOptions()] * 4)
    return resident_mib() - before


def test_rss_returns_after_a_large_batch(tiny_model_dir: Path) -> None:
    # Measured in a fresh process: a test worker's heap, shaped by whatever tests ran in it
    # before, once kept 29 MiB here where a fresh process keeps a few.
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        growth = pool.apply(growth_after_a_large_batch, (str(tiny_model_dir),))
    # Without the arena, glibc kept about 60 MB of the freed activations here.
    assert growth < 25
