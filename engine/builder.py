"""Build a ready engine from explicit config: load, warm up, calibrate, pick the batch size.

Everything slow happens here, once, before a server says it is ready.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.budget import GIB, Architecture, CostModel, MemoryBudget
from engine.loader import BackendOptions, create_backend
from engine.model_dir import DEFAULT_MODEL_ID, resolve_model
from engine.recognizer import Recognizer
from engine.scheduler import Scheduler, SchedulerConfig
from engine.types import SAMPLE_RATE, DecodeOptions

CPU_DEFAULT_BUDGET = 2 * GIB


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How to build the engine. `max_batch=None` means measure it; `memory_budget=None`
    means the device default (a fraction of free GPU memory, or 2 GiB on CPU)."""

    model: str = DEFAULT_MODEL_ID
    backend: BackendOptions = field(default_factory=BackendOptions)
    max_batch: int | None = None
    max_wait_ms: float = 20.0
    memory_budget: int | None = None
    budget_fraction: float = 0.8
    max_segment_ms: int = 15_000
    latency_target_s: float = 1.0
    autotune_seconds: float = 3.0
    autotune_candidates: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True, slots=True)
class EngineReport:
    """What start-up measured, for logs, /stats and the cold-start metric."""

    model: str
    test_model: bool
    backend: str
    load_s: float
    warmup_s: float
    max_batch: int
    batch_curve: tuple[dict[str, float], ...]
    memory_budget: int
    cost_scale: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "test_model": self.test_model,
            "backend": self.backend,
            "load_s": round(self.load_s, 3),
            "warmup_s": round(self.warmup_s, 3),
            "max_batch": self.max_batch,
            "batch_curve": list(self.batch_curve),
            "memory_budget": self.memory_budget,
            "cost_scale": round(self.cost_scale, 3),
        }


def architecture_of(config: dict[str, Any]) -> Architecture:
    enc = config.get("encoder_conf", {})
    return Architecture(
        hidden=int(enc.get("output_size", 512)),
        heads=int(enc.get("attention_heads", 4)),
        ffn=int(enc.get("linear_units", 2048)),
    )


def build_engine(config: EngineConfig) -> tuple[Recognizer, Scheduler, EngineReport]:
    """Load and warm the model, size the budget, and return a scheduler ready to serve."""
    started = time.perf_counter()
    model_dir = resolve_model(config.model)
    recognizer = Recognizer(model_dir, create_backend(model_dir, config.backend))
    loaded = time.perf_counter()
    cost = CostModel(architecture_of(dict(model_dir.config)))
    max_samples = config.max_segment_ms * SAMPLE_RATE // 1000
    cost.calibrate([measure_peak(recognizer, 1, max_samples)])
    budget = MemoryBudget(config.memory_budget or default_budget(config))
    curve: tuple[dict[str, float], ...] = ()
    if config.max_batch is not None:
        max_batch = config.max_batch
    else:
        max_batch, curve = choose_max_batch(recognizer, config)
    scheduler = Scheduler(
        SchedulerConfig(max_batch=max_batch, max_wait_ms=config.max_wait_ms),
        budget,
        cost,
        recognizer.frontend.num_frames,
    )
    scheduler.check_fits(max_samples)
    report = EngineReport(
        model=str(model_dir.path),
        test_model=model_dir.is_test_model,
        backend=recognizer.backend.name,
        load_s=loaded - started,
        warmup_s=time.perf_counter() - loaded,
        max_batch=max_batch,
        batch_curve=curve,
        memory_budget=budget.total,
        cost_scale=cost.scale,
    )
    return recognizer, scheduler, report


def speech_like(seconds: float, seed: int = 0) -> np.ndarray:
    """Low-level noise of the given length; decode cost does not depend on content."""
    rng = np.random.default_rng(seed)
    return (0.05 * rng.standard_normal(int(seconds * SAMPLE_RATE))).astype(np.float32)


def time_batch(recognizer: Recognizer, batch: int, seconds: float) -> float:
    """Seconds for one batch of `batch` utterances of `seconds` (after one warm-up run)."""
    utts = [recognizer.prepare(speech_like(seconds, i), DecodeOptions()) for i in range(batch)]
    recognizer.decode(utts)
    started = time.perf_counter()
    recognizer.decode(utts)
    return time.perf_counter() - started


def choose_max_batch(
    recognizer: Recognizer, config: EngineConfig
) -> tuple[int, tuple[dict[str, float], ...]]:
    """Measure throughput against batch size; keep the smallest within 5% of the best.

    Bigger is not assumed better: on a 2-core CPU batching barely helps, on a GPU it is
    where the throughput is. Candidates stop once a batch misses the latency target or
    throughput stops growing.
    """
    curve: list[dict[str, float]] = []
    for batch in config.autotune_candidates:
        wall = time_batch(recognizer, batch, config.autotune_seconds)
        rate = batch * config.autotune_seconds / wall
        earlier = max((p["audio_s_per_s"] for p in curve), default=0.0)
        curve.append({"batch": batch, "wall_s": round(wall, 4), "audio_s_per_s": round(rate, 2)})
        if wall > config.latency_target_s:
            break  # larger batches only take longer
        if len(curve) >= 3 and rate < 1.02 * earlier:
            break  # throughput stopped growing
    within = [
        p
        for p in curve
        if p["wall_s"] <= config.latency_target_s or p["batch"] == curve[0]["batch"]
    ]
    best = max(p["audio_s_per_s"] for p in within)
    chosen = min(int(p["batch"]) for p in within if p["audio_s_per_s"] >= 0.95 * best)
    return chosen, tuple(curve)


def measure_peak(recognizer: Recognizer, batch: int, samples: int) -> tuple[int, int, int]:
    """(batch, frames, peak bytes) of one decode: CUDA allocator peak or process RSS peak."""
    frames = recognizer.frontend.num_frames(samples)
    utts = [
        recognizer.prepare(speech_like(samples / SAMPLE_RATE, i), DecodeOptions())
        for i in range(batch)
    ]
    torch_cuda = _torch_cuda()
    if torch_cuda is not None:
        before = torch_cuda.memory_allocated()
        torch_cuda.reset_peak_memory_stats()
        recognizer.decode(utts)
        return batch, frames, int(torch_cuda.max_memory_allocated() - before)
    before = rss_bytes()
    reset_peak_rss()
    recognizer.decode(utts)
    return batch, frames, max(0, peak_rss_bytes() - before)


def default_budget(config: EngineConfig) -> int:
    """A fraction of free device memory after the weights load; a stated default on CPU."""
    torch_cuda = _torch_cuda()
    if config.backend.device.startswith("cuda") and torch_cuda is not None:
        free, _total = torch_cuda.mem_get_info()
        return int(free * config.budget_fraction)
    return CPU_DEFAULT_BUDGET


def _torch_cuda() -> Any | None:
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return torch.cuda


def reset_peak_rss() -> None:
    # Linux: writing 5 to clear_refs resets VmHWM, so the next peak is this decode's.
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _status_kib(field_name: str) -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field_name):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def rss_bytes() -> int:
    return _status_kib("VmRSS:")


def peak_rss_bytes() -> int:
    return _status_kib("VmHWM:")
