"""Build a ready engine from explicit config: load, warm up, calibrate, pick the batch size.

Everything slow happens here, once, before a server says it is ready. With several GPUs
each gets its own recognizer and memory budget; the cost model and the batch size are
measured once, on the first, since every device runs the same model at the same precision.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.backends.base import Backend
from engine.backends.graph_buckets import Bucketed, BucketPlan
from engine.backends.registry import BackendOptions, create_backend
from engine.decoding.recognizer import Recognizer, Utterance
from engine.features.fbank import Frontend
from engine.model.directory import DEFAULT_MODEL_ID, ONNX_NAMES, ModelDir, resolve_model
from engine.serving.budget import GIB, Architecture, CostModel, MemoryBudget
from engine.serving.device_memory import (  # re-exported: scripts read peaks through the builder
    DeviceMemory,
    device_memory,
    peak_rss_bytes,
    reset_peak_rss,
    rss_bytes,
)
from engine.serving.devices import parse_devices
from engine.serving.scheduler import Scheduler, SchedulerConfig
from engine.serving.tuning_cache import (
    Tuning,
    cpu_identity,
    load_tuning,
    save_tuning,
    tuning_key,
    usable_cpus,
    weights_fact,
)
from engine.speakers.encoder import LazySpeakerEncoder, SpeakerEncoder, Speakers
from engine.types import SAMPLE_RATE, DecodeOptions

__all__ = ["peak_rss_bytes", "reset_peak_rss", "rss_bytes"]

CPU_DEFAULT_BUDGET = 2 * GIB
MAX_FEATURE_THREADS = 8
log = logging.getLogger("sensestream.engine")

OpenBackend = Callable[[ModelDir, BackendOptions], Backend]
MemoryOf = Callable[[str, str], DeviceMemory]


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How to build the engine.

    `backend.device` may list several GPUs (`cuda:0,cuda:1`). `max_batch=None` means
    measure it. `memory_budget` is per device; None means `budget_fraction` of the free
    memory each GPU has once the weights are loaded, or 2 GiB on the CPU.
    `feature_threads=None` means 1 on the CPU (the backend owns the cores) and up to 8
    per GPU. `calibration_batches=None` means (1,) on the CPU and (1, 8) on GPUs.
    """

    model: str = DEFAULT_MODEL_ID
    backend: BackendOptions = field(default_factory=BackendOptions)
    max_batch: int | None = None
    max_wait_ms: float = 20.0
    # The device time file uploads may take while live streams are active.
    background_share: float = 0.02
    memory_budget: int | None = None
    budget_fraction: float = 0.8
    max_segment_ms: int = 15_000
    latency_target_s: float = 1.0
    autotune_seconds: float = 3.0
    autotune_candidates: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    # A bigger batch must buy this much more throughput to be chosen: every request in a
    # batch waits for the whole batch, so a final batched with partials arrives later.
    autotune_tolerance: float = 0.15
    feature_threads: int | None = None
    calibration_batches: tuple[int, ...] | None = None
    # Where CPU builds keep what they measured for the next start (None: always measure).
    tuning_cache: Path | None = None
    # The speaker encoder on each device (engine.speakers): True loads it at start (its
    # weights must be installed), None at the first request that asks who spoke, False never.
    speakers: bool | None = None
    # Confidence is asked of most decodes: serve the scored graph for all of them
    # (`BackendOptions.scored`); False serves the plain one and makes the scored one at the
    # first request that asks for confidence or hotwords (unscored, greedy until ready).
    confidence: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.budget_fraction <= 1:
            raise ValueError(f"budget_fraction must be within (0, 1]; got {self.budget_fraction}")
        if self.feature_threads is not None and self.feature_threads < 1:
            raise ValueError("feature_threads must be at least 1")
        parse_devices(self.backend.device)

    @property
    def devices(self) -> tuple[str, ...]:
        return parse_devices(self.backend.device)

    @property
    def on_gpu(self) -> bool:
        return self.devices[0].startswith("cuda")


@dataclass(frozen=True, slots=True)
class DeviceReport:
    """One device as start-up found it."""

    device: str
    backend: str
    memory_budget: int
    free_bytes: int | None
    features_on_device: bool = False
    graph_buckets: int = 0  # CUDA graphs captured (0: every batch runs eagerly)

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "backend": self.backend,
            "memory_budget": self.memory_budget,
            "free_bytes_after_load": self.free_bytes,
            "features_on_device": self.features_on_device,
            "graph_buckets": self.graph_buckets,
        }


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
    devices: tuple[DeviceReport, ...] = ()
    feature_threads: int = 1
    demo_model: bool = False  # the demo model trained on synthetic speech
    # The model's sentencepiece model: front ends refuse hotwords it cannot spell when a
    # stream starts, not at its first decode (not in /stats).
    tokenizer: bytes = field(default=b"", repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "test_model": self.test_model,
            "demo_model": self.demo_model,
            "backend": self.backend,
            "load_s": round(self.load_s, 3),
            "warmup_s": round(self.warmup_s, 3),
            "max_batch": self.max_batch,
            "batch_curve": list(self.batch_curve),
            "memory_budget": self.memory_budget,
            "cost_scale": round(self.cost_scale, 3),
            "devices": [d.to_dict() for d in self.devices],
            "feature_threads": self.feature_threads,
        }


@dataclass(frozen=True, slots=True)
class EngineParts:
    """A built engine: one recognizer per device, the shared scheduler, the report."""

    recognizers: tuple[Recognizer, ...]
    scheduler: Scheduler
    report: EngineReport

    @property
    def device_names(self) -> tuple[str, ...]:
        return tuple(d.device for d in self.report.devices)


@dataclass(frozen=True, slots=True)
class _Device:
    name: str
    recognizer: Recognizer
    memory: DeviceMemory
    budget: MemoryBudget
    free_bytes: int | None


def architecture_of(config: dict[str, Any], precision: str = "fp32") -> Architecture:
    """The cost model's dimensions; half precision halves every activation."""
    enc = config.get("encoder_conf", {})
    return Architecture(
        hidden=int(enc.get("output_size", 512)),
        heads=int(enc.get("attention_heads", 4)),
        ffn=int(enc.get("linear_units", 2048)),
        dtype_bytes=2 if precision in ("fp16", "bf16") else 4,
    )


def build_engine_parts(
    config: EngineConfig,
    *,
    open_backend: OpenBackend = create_backend,
    memory_of: MemoryOf = device_memory,
) -> EngineParts:
    """Every device loaded, budgeted and warmed; `open_backend` and `memory_of` are seams
    for tests (fake devices with declared costs)."""
    started = time.perf_counter()
    model_dir = resolve_model(config.model)
    devices = [
        _open_device(model_dir, config, name, open_backend, memory_of) for name in config.devices
    ]
    loaded = time.perf_counter()
    first = devices[0]
    tuning = _tune(config, model_dir, first, min(d.budget.total for d in devices))
    for other in devices[1:]:
        # Kernel selection and library handles are per device: pay for them before serving.
        time_batch(other.recognizer, 1, config.autotune_seconds, repeats=1)
    max_batch, curve = tuning.max_batch, tuning.curve
    plan = graph_plan(first.recognizer.backend)
    cost = CostModel(
        architecture_of(dict(model_dir.config), config.backend.resolved_precision()),
        scale=tuning.cost_scale,
        shape=None if plan is None else plan.padded,
    )
    scheduler = Scheduler(
        SchedulerConfig(
            max_batch=max_batch,
            max_wait_ms=config.max_wait_ms,
            background_share=config.background_share,
        ),
        [d.budget for d in devices],
        cost,
        first.recognizer.frontend.num_frames,
    )
    scheduler.check_fits(config.max_segment_ms * SAMPLE_RATE // 1000)
    report = EngineReport(
        model=str(model_dir.path),
        test_model=model_dir.is_test_model,
        demo_model=model_dir.is_demo_model,
        backend=first.recognizer.backend.name,
        load_s=loaded - started,
        warmup_s=time.perf_counter() - loaded,
        max_batch=max_batch,
        batch_curve=curve,
        memory_budget=first.budget.total,
        cost_scale=cost.scale,
        devices=tuple(_device_report(d) for d in devices),
        feature_threads=feature_threads(config, os.cpu_count() or 1),
        tokenizer=first.recognizer.tokenizer.serialized(),
    )
    return EngineParts(tuple(d.recognizer for d in devices), scheduler, report)


def _device_report(device: _Device) -> DeviceReport:
    plan = graph_plan(device.recognizer.backend)
    return DeviceReport(
        device.name,
        device.recognizer.backend.name,
        device.budget.total,
        device.free_bytes,
        features_on_device=device.recognizer.features_on_device,
        graph_buckets=0 if plan is None else len(plan.buckets),
    )


def graph_plan(backend: Backend) -> BucketPlan | None:
    """The CUDA graph buckets a backend replays, if any."""
    return backend.graph_plan if isinstance(backend, Bucketed) else None


def _tune(config: EngineConfig, model_dir: ModelDir, first: _Device, smallest: int) -> Tuning:
    """The cost scale and batch size: stored from an earlier start on this host, or measured.

    Only CPU builds are stored: a GPU's warm-up also selects its kernels, which a stored
    answer would skip, and GPU hosts start rarely enough to afford the seconds.
    """
    folder = config.tuning_cache if not config.on_gpu else None
    key = tuning_key(_tuning_facts(config, model_dir, first))
    stored = load_tuning(folder, key) if folder is not None else None
    if stored is not None:
        warm_up(first.recognizer)
        log.info("reusing the batch size and cost scale measured at an earlier start")
        return stored
    cost = calibrated_cost(first.recognizer, first.memory, config)
    if config.max_batch is not None:
        tuning = Tuning(config.max_batch, (), cost.scale)
    else:
        frames = first.recognizer.frontend.num_frames(int(config.autotune_seconds * SAMPLE_RATE))
        max_batch, curve = choose_max_batch(
            first.recognizer, config, fits=lambda b: cost.bytes(b, frames) <= smallest
        )
        tuning = Tuning(max_batch, curve, cost.scale)
    if folder is not None:
        save_tuning(folder, key, tuning)
    return tuning


def _tuning_facts(config: EngineConfig, model_dir: ModelDir, first: _Device) -> dict[str, Any]:
    """Everything a stored tuning depends on; any change measures again."""
    packages = ("sensestream", "onnxruntime", "onnxruntime-gpu", "torch", "numpy")
    runtime = {name: _version(name) for name in packages}
    precision = config.backend.resolved_precision()
    exported = model_dir.onnx_path(precision) if precision in ONNX_NAMES else None
    return {
        "weights": weights_fact(model_dir.weights_path),
        "export": weights_fact(exported) if exported is not None else None,
        "backend": first.recognizer.backend.name,
        "options": asdict(config.backend),
        "devices": config.devices,
        "budget": first.budget.total,
        "settings": [
            config.max_batch,
            config.max_segment_ms,
            config.latency_target_s,
            config.autotune_seconds,
            config.autotune_candidates,
            config.autotune_tolerance,
            config.calibration_batches,
        ],
        "cpu": cpu_identity(),
        "cpus": usable_cpus(),
        "omp_threads": os.environ.get("OMP_NUM_THREADS"),
        "runtime": runtime,
    }


def _version(module: str) -> str | None:
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return None


def _open_device(
    model_dir: ModelDir,
    config: EngineConfig,
    name: str,
    open_backend: OpenBackend,
    memory_of: MemoryOf,
) -> _Device:
    """Load the weights on one device, then read what memory is left for activations."""
    cache = config.tuning_cache if not name.startswith("cuda") else None
    # CUDA graphs cover utterances up to the longest VAD segment; longer ones run eagerly.
    longest = Frontend.from_model_dir(model_dir.path).num_frames(
        config.max_segment_ms * SAMPLE_RATE // 1000
    )
    options = replace(
        config.backend,
        device=name,
        graph_cache=cache,
        graph_frames=max(1, longest),
        scored=config.backend.scored or config.confidence,
    )
    speakers = open_speakers(config.speakers, name)
    recognizer = Recognizer(model_dir, open_backend(model_dir, options), speakers)
    memory = memory_of(name, options.backend)
    if config.memory_budget is not None:
        return _Device(name, recognizer, memory, MemoryBudget(config.memory_budget), None)
    free = memory.free_bytes() if name.startswith("cuda") else None
    total = default_budget(config, name, free)
    return _Device(name, recognizer, memory, MemoryBudget(total), free)


def open_speakers(wanted: bool | None, device: str) -> Speakers | None:
    """The speaker encoder on `device`, as `EngineConfig.speakers` asks: True loads it now
    (its weights must be installed), None at the first request that asks who spoke."""
    if wanted is None:
        return LazySpeakerEncoder(device)
    return SpeakerEncoder(device=device) if wanted else None


def default_budget(config: EngineConfig, device: str, free_bytes: int | None) -> int:
    """A fraction of the memory free after the weights load on a GPU; a stated CPU default."""
    if not device.startswith("cuda") or free_bytes is None:
        return CPU_DEFAULT_BUDGET
    return max(1, int(free_bytes * config.budget_fraction))


def feature_threads(config: EngineConfig, cpus: int) -> int:
    """Threads computing features per device: GPUs finish a batch faster than one core can
    feed it, but on the CPU the backend already uses every core."""
    if config.feature_threads is not None:
        return config.feature_threads
    if not config.on_gpu:
        return 1
    return max(1, min(MAX_FEATURE_THREADS, cpus // len(config.devices)))


def calibrated_cost(
    recognizer: Recognizer, memory: DeviceMemory, config: EngineConfig
) -> CostModel:
    """The cost model, scaled to cover measured peaks of maximum-length batches."""
    precision = config.backend.resolved_precision()
    cost = CostModel(architecture_of(dict(recognizer.model_dir.config), precision))
    max_samples = config.max_segment_ms * SAMPLE_RATE // 1000
    batches = config.calibration_batches or ((1, 8) if config.on_gpu else (1,))
    backend = recognizer.backend
    # Graph batches run in memory captured at start-up: only eager peaks say what a batch
    # costs.
    with backend.eager() if isinstance(backend, Bucketed) else contextlib.nullcontext():
        cost.calibrate([measure_peak(recognizer, b, max_samples, memory) for b in batches])
    return cost


def speech_like(seconds: float, seed: int = 0) -> np.ndarray:
    """Low-level noise of the given length; decode cost does not depend on content."""
    rng = np.random.default_rng(seed)
    return (0.05 * rng.standard_normal(int(seconds * SAMPLE_RATE))).astype(np.float32)


def spread_lengths(batch: int, seconds: float) -> list[float]:
    """`batch` lengths evenly over [0.5, 1.5] x `seconds` (their mean is `seconds`)."""
    if batch == 1:
        return [seconds]
    return [seconds * (0.5 + i / (batch - 1)) for i in range(batch)]


def warm_up(recognizer: Recognizer, seconds: float = 1.0) -> None:
    """One short decode, so the runtime's first-call set-up is paid before serving."""
    recognizer.decode([recognizer.prepare(speech_like(seconds, 0), DecodeOptions())])


def time_batch(
    recognizer: Recognizer,
    batch: int,
    seconds: float,
    repeats: int = 2,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Seconds for one batch of `batch` utterances averaging `seconds`: the best of
    `repeats` runs after a warm-up.

    The lengths spread evenly over 0.5-1.5x `seconds`, as live traffic's do, so the
    padding a real batch carries is in the measurement: with equal lengths, batch 4
    looked 30% faster than batch 1 on a 2-core CPU and served live streams 15% slower.
    The best run, because on a shared CPU one run can be slowed by anything that wakes.
    """
    utts = [
        recognizer.prepare(speech_like(length, i), DecodeOptions())
        for i, length in enumerate(spread_lengths(batch, seconds))
    ]
    recognizer.decode(utts)
    walls = []
    for _ in range(max(1, repeats)):
        started = clock()
        recognizer.decode(utts)
        walls.append(clock() - started)
    return min(walls)


def choose_max_batch(
    recognizer: Recognizer,
    config: EngineConfig,
    fits: Callable[[int], bool] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[int, tuple[dict[str, float], ...]]:
    """Measure throughput against batch size; keep the smallest within tolerance of the best.

    Bigger is not assumed better: on a 2-core CPU batching barely helps, on a GPU it is
    where the throughput is. Candidates stop once a batch misses the latency target,
    throughput stops growing, or (`fits`) the batch would not fit the memory budget.
    `clock` is a seam for tests (a device with a declared cost on a fake clock).
    """
    curve: list[dict[str, float]] = []
    for batch in config.autotune_candidates:
        if curve and fits is not None and not fits(batch):
            break  # it could never be admitted, and trying it could run out of memory
        wall = time_batch(recognizer, batch, config.autotune_seconds, clock=clock)
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
    floor = (1 - config.autotune_tolerance) * best
    chosen = min(int(p["batch"]) for p in within if p["audio_s_per_s"] >= floor)
    return chosen, tuple(curve)


def measure_peak(
    recognizer: Recognizer, batch: int, samples: int, memory: DeviceMemory
) -> tuple[int, int, int]:
    """(batch, frames, peak bytes) of one decode of `batch` utterances of `samples`."""
    frames = recognizer.frontend.num_frames(samples)
    utts = prepare_many(recognizer, [speech_like(samples / SAMPLE_RATE, i) for i in range(batch)])
    memory.start_peak()
    recognizer.decode(utts)
    return batch, frames, memory.peak_bytes()


def prepare_many(recognizer: Recognizer, audios: Sequence[np.ndarray]) -> list[Utterance]:
    """Features for each clip, with default prompts."""
    return [recognizer.prepare(a, DecodeOptions()) for a in audios]
