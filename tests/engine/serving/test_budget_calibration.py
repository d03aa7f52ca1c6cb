"""Budgets and cost calibration with fake devices: declared memory costs, declared free memory."""

from __future__ import annotations

import gc
import mmap
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine.backends.registry import BackendOptions
from engine.decoding.recognizer import Recognizer
from engine.errors import EngineError
from engine.model.directory import ModelDir
from engine.model.prompts import PROMPT_FRAMES
from engine.serving.builder import (
    CPU_DEFAULT_BUDGET,
    EngineConfig,
    build_engine_parts,
    choose_max_batch,
    default_budget,
    feature_threads,
)
from engine.serving.device_memory import (
    CudaDriverMemory,
    HostMemory,
    TorchCudaMemory,
    UnknownMemory,
    device_memory,
)
from engine.types import DecodeOptions
from tests.engine.gpu import needs_cuda

GIB = 1 << 30
BYTES_PER_ITEM_FRAME = 3 << 20  # the fake device's true activation cost


class FakeGpuMemory:
    """A GPU with `free` bytes once the weights are in; backends report use through `use`."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.level = 0
        self.peak = 0
        self.base = 0
        self.measured = 0

    def use(self, nbytes: int) -> None:
        self.peak = max(self.peak, self.level + nbytes)

    def free_bytes(self) -> int:
        return self.free

    def start_peak(self) -> None:
        self.base = self.peak = self.level
        self.measured += 1

    def peak_bytes(self) -> int:
        return self.peak - self.base


class DeclaredMemoryBackend:
    """Needs BYTES_PER_ITEM_FRAME per padded item-frame on its fake GPU."""

    name = "declared-memory"

    def __init__(self, memory: FakeGpuMemory) -> None:
        self.memory = memory

    def run(
        self, feats: Sequence[np.ndarray], options: Sequence[DecodeOptions]
    ) -> list[np.ndarray]:
        frames = max(f.shape[0] for f in feats) + PROMPT_FRAMES
        self.memory.use(len(feats) * frames * BYTES_PER_ITEM_FRAME)
        return [np.zeros(f.shape[0] + PROMPT_FRAMES, np.int32) for f in feats]


def fake_gpus(free: dict[str, int]) -> tuple[dict[str, FakeGpuMemory], dict[str, object]]:
    memories = {name: FakeGpuMemory(f) for name, f in free.items()}

    def open_backend(model_dir: ModelDir, options: BackendOptions) -> DeclaredMemoryBackend:
        assert options.device in memories  # one backend per listed device
        return DeclaredMemoryBackend(memories[options.device])

    def memory_of(device: str, backend: str) -> FakeGpuMemory:
        return memories[device]

    return memories, {"open_backend": open_backend, "memory_of": memory_of}


def gpu_config(tiny: Path, device: str = "cuda:0,cuda:1", **kw: object) -> EngineConfig:
    return EngineConfig(
        model=str(tiny),
        backend=BackendOptions(backend="torch", device=device),
        max_batch=4,
        **kw,  # type: ignore[arg-type]
    )


def test_each_gpu_gets_a_fraction_of_its_own_free_memory(tiny_model_dir: Path) -> None:
    _, seams = fake_gpus({"cuda:0": 10 * GIB, "cuda:1": 5 * GIB})
    parts = build_engine_parts(gpu_config(tiny_model_dir), **seams)  # type: ignore[arg-type]
    budgets = [b.total for b in parts.scheduler.budgets]
    assert budgets == [int(10 * GIB * 0.8), int(5 * GIB * 0.8)]
    assert [d.device for d in parts.report.devices] == ["cuda:0", "cuda:1"]
    assert [d.free_bytes for d in parts.report.devices] == [10 * GIB, 5 * GIB]
    assert parts.device_names == ("cuda:0", "cuda:1")
    assert len(parts.recognizers) == 2
    assert parts.recognizers[0].backend is not parts.recognizers[1].backend
    assert parts.report.memory_budget == budgets[0]
    assert parts.report.to_dict()["devices"][1]["memory_budget"] == budgets[1]


def test_the_fraction_is_a_config_value(tiny_model_dir: Path) -> None:
    _, seams = fake_gpus({"cuda:0": 10 * GIB})
    config = gpu_config(tiny_model_dir, "cuda:0", budget_fraction=0.5)
    parts = build_engine_parts(config, **seams)  # type: ignore[arg-type]
    assert parts.scheduler.budgets[0].total == 5 * GIB
    with pytest.raises(ValueError, match="budget_fraction"):
        replace(config, budget_fraction=1.5)


def test_an_explicit_budget_applies_to_every_device(tiny_model_dir: Path) -> None:
    _, seams = fake_gpus({"cuda:0": 10 * GIB, "cuda:1": 5 * GIB})
    config = gpu_config(tiny_model_dir, memory_budget=3 * GIB)
    parts = build_engine_parts(config, **seams)  # type: ignore[arg-type]
    assert [b.total for b in parts.scheduler.budgets] == [3 * GIB, 3 * GIB]
    assert [d.free_bytes for d in parts.report.devices] == [None, None]


def test_warm_up_calibrates_the_cost_to_cover_measured_peaks(tiny_model_dir: Path) -> None:
    memories, seams = fake_gpus({"cuda:0": 40 * GIB})
    parts = build_engine_parts(gpu_config(tiny_model_dir, "cuda:0"), **seams)  # type: ignore[arg-type]
    cost = parts.scheduler.cost
    assert cost.arch.dtype_bytes == 2  # auto precision on a GPU is fp16
    frames = parts.recognizers[0].frontend.num_frames(15 * 16000)
    for batch in (1, 8):  # the GPU default measures both
        true_need = batch * (frames + PROMPT_FRAMES) * BYTES_PER_ITEM_FRAME
        assert cost.bytes(batch, frames) >= true_need
    assert memories["cuda:0"].measured == 2
    # The estimate is scaled up, not replaced: raw architecture bytes are far smaller here.
    assert cost.scale > 1


def test_calibration_batches_can_be_chosen(tiny_model_dir: Path) -> None:
    memories, seams = fake_gpus({"cuda:0": 40 * GIB})
    config = gpu_config(tiny_model_dir, "cuda:0", calibration_batches=(1, 2, 4))
    build_engine_parts(config, **seams)  # type: ignore[arg-type]
    assert memories["cuda:0"].measured == 3


def test_too_little_free_memory_refuses_to_start(tiny_model_dir: Path) -> None:
    _, seams = fake_gpus({"cuda:0": 10 * GIB, "cuda:1": 64 << 20})
    with pytest.raises(EngineError, match="memory-budget"):
        build_engine_parts(gpu_config(tiny_model_dir), **seams)  # type: ignore[arg-type]


def test_autotune_never_tries_a_batch_the_budget_cannot_admit(tiny_model_dir: Path) -> None:
    from tests.engine.serving.test_builder import fake_recognizer

    recognizer: Recognizer = fake_recognizer(tiny_model_dir, 0.02, 1e-7)
    config = EngineConfig(autotune_seconds=1.0, autotune_candidates=(1, 2, 4, 8, 16))
    chosen, curve = choose_max_batch(recognizer, config, fits=lambda b: b <= 4)
    assert [p["batch"] for p in curve] == [1, 2, 4]
    assert chosen == 4


def test_default_budget_rules() -> None:
    config = EngineConfig(budget_fraction=0.25)
    assert default_budget(config, "cuda:0", 8 * GIB) == 2 * GIB
    assert default_budget(config, "cpu", None) == CPU_DEFAULT_BUDGET


def test_feature_threads_rules() -> None:
    two = EngineConfig(backend=BackendOptions(device="cuda:0,cuda:1"))
    assert feature_threads(two, cpus=16) == 8
    assert feature_threads(two, cpus=6) == 3
    assert feature_threads(two, cpus=1) == 1
    assert feature_threads(EngineConfig(), cpus=16) == 1  # the CPU backend owns the cores
    assert feature_threads(EngineConfig(feature_threads=3), cpus=16) == 3


class FakeTorchCuda:
    """The five torch.cuda functions the readers call, for one GPU with index 1."""

    def __init__(self) -> None:
        self.free, self.allocated, self.reserved, self.peak = 1000, 100, 300, 100

    def mem_get_info(self, index: int) -> tuple[int, int]:
        assert index == 1
        return self.free, 2000

    def memory_allocated(self, index: int) -> int:
        return self.allocated

    def memory_reserved(self, index: int) -> int:
        return self.reserved

    def max_memory_allocated(self, index: int) -> int:
        return self.peak

    def reset_peak_memory_stats(self, index: int) -> None:
        self.peak = self.allocated


def test_torch_reader_counts_cached_blocks_as_free_and_peaks_from_the_start() -> None:
    cuda = FakeTorchCuda()
    memory = TorchCudaMemory(1, cuda)
    assert memory.free_bytes() == 1000 + 200
    cuda.peak = 999
    memory.start_peak()  # resets the allocator's peak to the current allocation
    cuda.peak = 500
    assert memory.peak_bytes() == 400


def test_driver_reader_sees_the_drop_in_free_memory() -> None:
    cuda = FakeTorchCuda()
    memory = CudaDriverMemory(1, cuda)
    memory.start_peak()
    cuda.free = 600
    assert memory.peak_bytes() == 400
    cuda.free = 1200
    assert memory.peak_bytes() == 0


def fresh_resident(size: int) -> mmap.mmap:
    """Private anonymous memory, every page written: new resident pages, whatever the
    allocator holds."""
    block = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for offset in range(0, size, mmap.PAGESIZE):  # a page at a time: no buffer as large
        block[offset] = 1
    return block


def peak_seen(meanwhile: Callable[[], object]) -> int:
    """The host reader's peak over a fresh 64 MiB, with `meanwhile` run inside the window."""
    memory = HostMemory()
    memory.start_peak()
    meanwhile()
    with fresh_resident(64 << 20):
        return memory.peak_bytes()


def test_host_reader_sees_a_real_allocation() -> None:
    assert peak_seen(lambda: None) >= 48 << 20
    assert HostMemory().free_bytes() > 0


def test_host_reader_is_not_fooled_by_garbage_freed_inside_the_window() -> None:
    class Holder:
        pass

    cycle = Holder()
    cycle.self = cycle  # type: ignore[attr-defined]
    cycle.buffer = np.ones(64 << 20, np.uint8)  # type: ignore[attr-defined]
    del cycle  # garbage now, but only a cycle collection frees it
    # As a collection set off by the measured work's first allocations would:
    assert peak_seen(gc.collect) >= 48 << 20


def test_host_reader_is_not_fooled_by_file_pages_evicted_inside_the_window(
    tmp_path: Path,
) -> None:
    mapped = tmp_path / "library.so"
    mapped.write_bytes(b"\1" * (64 << 20))
    with mapped.open("rb") as file, mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ) as pages:
        assert sum(pages[i] for i in range(0, len(pages), mmap.PAGESIZE)) > 0  # all resident
        # As the kernel evicting them would:
        assert peak_seen(lambda: pages.madvise(mmap.MADV_DONTNEED)) >= 48 << 20


def test_host_reader_is_not_fooled_by_lazily_freed_pages_reclaimed_inside_the_window() -> None:
    with fresh_resident(64 << 20) as released:
        released.madvise(mmap.MADV_FREE)  # what a jemalloc-style allocator does on free
        # As the kernel reclaiming them would:
        assert peak_seen(lambda: released.madvise(mmap.MADV_DONTNEED)) >= 48 << 20


def test_readers_by_device() -> None:
    assert isinstance(device_memory("cpu", "onnx"), HostMemory)
    unknown = UnknownMemory("cuda:0")
    assert unknown.peak_bytes() == 0
    with pytest.raises(EngineError, match="memory-budget"):
        unknown.free_bytes()


@needs_cuda
@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_readers_on_a_real_gpu(backend: str) -> None:
    memory = device_memory("cuda:0", backend)
    assert isinstance(memory, TorchCudaMemory if backend == "torch" else CudaDriverMemory)
    assert memory.free_bytes() > 0
    import torch

    # An earlier test's freed blocks stay in torch's cache, where this allocation would
    # land without the driver seeing it.
    torch.cuda.empty_cache()
    memory.start_peak()
    block = torch.empty(256 << 20, dtype=torch.uint8, device="cuda:0")
    assert memory.peak_bytes() >= 256 << 20
    del block
