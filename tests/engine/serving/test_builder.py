"""Engine start-up: warm-up, calibration, batch-size choice by measurement."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine.backends.base import Backend
from engine.backends.cuda_graphs import eager_buckets
from engine.backends.graph_buckets import plan_buckets
from engine.backends.onnx import OnnxBackend
from engine.backends.registry import BackendOptions, create_backend
from engine.backends.torch import TorchBackend
from engine.decoding.recognizer import Recognizer
from engine.errors import EngineError
from engine.model.directory import ModelDir, load_model_dir
from engine.model.prompts import PROMPT_FRAMES
from engine.serving.builder import EngineConfig, build_engine_parts, choose_max_batch
from engine.types import DecodeOptions


class FakeClock:
    """Time that moves only when a fake device says it has worked."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class DeclaredCostBackend:
    """Takes `overhead + per_item_frame * items * frames` seconds: a device with a known cost.

    It pays for the padded frames, as a CPU does, unless `padding_free` (then only the
    real ones count, an idealised device). With a `clock` it advances that clock by the
    cost instead of sleeping, so measurements of it are exact on any machine.
    """

    name = "declared"

    def __init__(
        self,
        overhead: float,
        per_item_frame: float,
        padding_free: bool = False,
        clock: FakeClock | None = None,
    ) -> None:
        self.overhead = overhead
        self.per_item_frame = per_item_frame
        self.padding_free = padding_free
        self.clock = clock

    def run(
        self, feats: Sequence[np.ndarray], options: Sequence[DecodeOptions]
    ) -> list[np.ndarray]:
        lengths = [f.shape[0] for f in feats]
        frames = sum(lengths) if self.padding_free else max(lengths) * len(lengths)
        cost = self.overhead + self.per_item_frame * frames
        if self.clock is None:
            time.sleep(cost)
        else:
            self.clock.advance(cost)
        return [np.zeros(f.shape[0] + PROMPT_FRAMES, np.int32) for f in feats]


def fake_recognizer(
    tiny_model_dir: Path,
    overhead: float,
    per_item_frame: float,
    padding_free: bool = False,
    clock: FakeClock | None = None,
) -> Recognizer:
    backend = DeclaredCostBackend(overhead, per_item_frame, padding_free, clock)
    return Recognizer(load_model_dir(tiny_model_dir), backend)


def choose(
    tiny_model_dir: Path,
    overhead: float,
    per_item_frame: float,
    config: EngineConfig,
    padding_free: bool = False,
) -> tuple[int, tuple[dict[str, float], ...]]:
    """The batch choice for a declared-cost device, measured on a fake clock."""
    clock = FakeClock()
    recognizer = fake_recognizer(tiny_model_dir, overhead, per_item_frame, padding_free, clock)
    return choose_max_batch(recognizer, config, clock=clock.now)


CONFIG = EngineConfig(autotune_seconds=1.0, autotune_candidates=(1, 2, 4, 8, 16))


def test_overhead_bound_device_gets_a_big_batch(tiny_model_dir: Path) -> None:
    # GPU-like: a fixed 40 ms per call, almost nothing per frame.
    chosen, curve = choose(tiny_model_dir, 0.04, 1e-6, CONFIG)
    assert chosen == 16
    assert curve[-1]["audio_s_per_s"] > 5 * curve[0]["audio_s_per_s"]


def test_compute_bound_device_stays_unbatched(tiny_model_dir: Path) -> None:
    # CPU-like: cost grows with the work (padding included), so batching buys nothing.
    chosen, curve = choose(tiny_model_dir, 0.0, 2e-3, CONFIG)
    assert chosen == 1
    assert len(curve) <= 3  # it stopped once throughput stopped growing


def test_a_small_batching_gain_is_not_worth_its_latency(tiny_model_dir: Path) -> None:
    # Batch 4 about 6% faster than batch 1 (as this 2-core CPU once measured).
    chosen, curve = choose(tiny_model_dir, 0.0006, 4e-4, CONFIG, padding_free=True)
    assert max(p["audio_s_per_s"] for p in curve) > 1.03 * curve[0]["audio_s_per_s"]
    assert chosen == 1
    eager = replace(CONFIG, autotune_tolerance=0.0)
    chosen, _ = choose(tiny_model_dir, 0.0006, 4e-4, eager, padding_free=True)
    assert chosen > 1


def test_the_measurement_pays_for_padding_as_live_batches_do(tiny_model_dir: Path) -> None:
    # Equal lengths would make batch 4 30% faster here (per-call overhead amortised);
    # with the spread of lengths live batches have, the padding eats all of it.
    chosen, curve = choose(tiny_model_dir, 0.0015, 2e-4, CONFIG)
    assert chosen == 1
    assert all(p["audio_s_per_s"] < 1.05 * curve[0]["audio_s_per_s"] for p in curve)


def test_latency_target_caps_the_batch(tiny_model_dir: Path) -> None:
    config = replace(CONFIG, latency_target_s=0.12)
    chosen, curve = choose(tiny_model_dir, 0.05, 4e-4, config, padding_free=True)
    assert all(p["wall_s"] <= 0.12 for p in curve if p["batch"] == chosen)
    assert chosen == 8  # 16 would take 0.16 s


def test_build_engine_on_the_tiny_model(tiny_model_dir: Path) -> None:
    config = EngineConfig(
        model=str(tiny_model_dir),
        backend=BackendOptions(precision="fp32"),
        max_batch=None,
        autotune_candidates=(1, 2, 4),
    )
    parts = build_engine_parts(config)
    recognizer, scheduler, report = parts.recognizers[0], parts.scheduler, parts.report
    assert report.test_model
    assert report.backend == "onnx-fp32-cpu"
    assert report.max_batch in (1, 2, 4)
    assert report.batch_curve[0]["batch"] == 1
    assert report.memory_budget == 2 << 30
    assert scheduler.config.max_batch == report.max_batch
    assert report.cost_scale > 0
    assert recognizer.backend.name == "onnx-fp32-cpu"


def test_too_small_budget_refuses_to_start(tiny_model_dir: Path) -> None:
    config = EngineConfig(
        model=str(tiny_model_dir),
        backend=BackendOptions(precision="fp32"),
        max_batch=1,
        memory_budget=1 << 16,
    )
    with pytest.raises(EngineError, match="memory-budget"):
        build_engine_parts(config)


def test_graph_buckets_reach_the_cost_model_and_calibration_runs_eagerly(
    tiny_model_dir: Path,
) -> None:
    built: list[TorchBackend] = []

    def open_backend(model_dir: ModelDir, options: BackendOptions) -> TorchBackend:
        plan = plan_buckets(options.graph_frames, (1, 2))
        backend = TorchBackend(
            model_dir, threads=1, device_features=True, graphs=plan, bucketing=eager_buckets
        )
        built.append(backend)
        return backend

    config = EngineConfig(
        model=str(tiny_model_dir),
        backend=BackendOptions("torch", "fp32"),
        max_batch=2,
        max_segment_ms=3000,
    )
    parts = build_engine_parts(config, open_backend=open_backend)
    (backend,) = built
    plan, graphs = backend.graph_plan, backend.graphs
    assert plan is not None and graphs is not None
    # The longest bucket holds the longest VAD segment: 3 s is 50 feature frames.
    assert plan.lengths[-1] == 56
    assert parts.scheduler.cost.shape is not None
    assert parts.scheduler.cost.shape(2, 20) == plan.padded(2, 20) == (2, 24)
    (device,) = parts.report.devices
    assert device.features_on_device and device.graph_buckets == len(plan.buckets)
    # Calibration measured eager peaks: no batch replayed a bucket during the build.
    assert graphs.stats.eager >= 1 and graphs.stats.replayed == 0


@pytest.mark.parametrize("confidence", [True, False])
def test_with_confidence_on_every_device_serves_the_scored_graph(
    tiny_model_dir: Path, confidence: bool
) -> None:
    opened: list[BackendOptions] = []

    def open_backend(model_dir: ModelDir, options: BackendOptions) -> Backend:
        opened.append(options)
        return create_backend(model_dir, options)

    config = EngineConfig(
        model=str(tiny_model_dir),
        backend=BackendOptions("onnx", "fp32"),
        max_batch=1,
        confidence=confidence,
    )
    parts = build_engine_parts(config, open_backend=open_backend)
    assert [o.scored for o in opened] == [confidence]
    (recognizer,) = parts.recognizers
    backend = recognizer.backend
    assert isinstance(backend, OnnxBackend)
    # Scored from the first request; else the scored graph is only made when first asked.
    assert backend.scoring_ready() is confidence
