"""A CPU start reuses what an earlier start measured on this host, and measures again on change."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from engine.backends.registry import BackendOptions
from engine.model.directory import ModelDir
from engine.serving.builder import EngineConfig, build_engine_parts
from engine.serving.tuning_cache import Tuning, cpu_identity, load_tuning, save_tuning
from engine.types import DecodeOptions
from tests.engine.serving.test_builder import DeclaredCostBackend


class CountingBackend(DeclaredCostBackend):
    """A declared-cost device that counts the batches it runs."""

    def __init__(self) -> None:
        super().__init__(overhead=0.002, per_item_frame=1e-5)
        self.batches = 0

    def run(
        self, feats: Sequence[np.ndarray], options: Sequence[DecodeOptions]
    ) -> list[np.ndarray]:
        self.batches += 1
        return super().run(feats, options)


def build(config: EngineConfig) -> tuple[int, int, tuple[dict[str, float], ...]]:
    """(batches the build ran, chosen max batch, curve)."""
    backend = CountingBackend()

    def open_backend(model_dir: ModelDir, options: BackendOptions) -> CountingBackend:
        return backend

    parts = build_engine_parts(config, open_backend=open_backend)
    return backend.batches, parts.report.max_batch, parts.report.batch_curve


def config_for(model: Path, cache: Path) -> EngineConfig:
    return EngineConfig(
        model=str(model),
        backend=BackendOptions(precision="fp32"),
        autotune_seconds=0.5,
        autotune_candidates=(1, 2, 4),
        tuning_cache=cache,
    )


def test_second_start_reuses_the_measurement(tiny_model_dir: Path, tmp_path: Path) -> None:
    config = config_for(tiny_model_dir, tmp_path / "tuning")
    measured_runs, batch, curve = build(config)
    reused_runs, reused_batch, reused_curve = build(config)
    assert measured_runs > 4  # calibration, then a warm-up and two timed runs per size
    assert reused_runs == 1  # one short warm-up decode: first-call set-up is still paid for
    assert (reused_batch, reused_curve) == (batch, curve)


def test_a_changed_setting_measures_again(tiny_model_dir: Path, tmp_path: Path) -> None:
    config = config_for(tiny_model_dir, tmp_path / "tuning")
    build(config)
    runs, _, curve = build(replace(config, autotune_candidates=(1, 2)))
    assert runs > 2
    assert [p["batch"] for p in curve] == [1, 2]


def test_no_cache_folder_always_measures(tiny_model_dir: Path, tmp_path: Path) -> None:
    config = replace(config_for(tiny_model_dir, tmp_path), tuning_cache=None)
    assert build(config)[0] > 2
    assert build(config)[0] > 2
    assert list(tmp_path.iterdir()) == []


def test_unreadable_entries_are_measured_again(tmp_path: Path) -> None:
    save_tuning(tmp_path, "k", Tuning(4, ({"batch": 1.0},), 1.5))
    assert load_tuning(tmp_path, "k") == Tuning(4, ({"batch": 1.0},), 1.5)
    for broken in ("{", json.dumps({"format": 1, "max_batch": 0, "curve": [], "cost_scale": 1})):
        (tmp_path / "k.json").write_text(broken)
        assert load_tuning(tmp_path, "k") is None
    assert load_tuning(tmp_path, "absent") is None


def test_cpu_identity_names_the_model_and_flags(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Example CPU\nflags\t\t: avx2 avx512_vnni\n"
        "processor\t: 1\nmodel name\t: Example CPU\nflags\t\t: avx2 avx512_vnni\n"
    )
    assert cpu_identity(cpuinfo) == "Example CPU | avx2 avx512_vnni"
