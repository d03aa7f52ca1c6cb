"""Memory readings per device, for sizing budgets and calibrating the cost model.

The builder measures through this small protocol only, so tests pass fakes and the same
code sizes a CPU, a torch GPU or an onnxruntime GPU.
"""

from __future__ import annotations

import contextlib
import gc
from pathlib import Path
from typing import Any, Protocol

from engine.errors import EngineError
from engine.serving.devices import device_index


class DeviceMemory(Protocol):
    """Free memory now, and the peak of one measured stretch of work."""

    def free_bytes(self) -> int:
        """Bytes free for activations now."""
        ...

    def start_peak(self) -> None:
        """Begin a measurement: later peaks are counted from the current level."""
        ...

    def peak_bytes(self) -> int:
        """The highest use since `start_peak`, above the level it started from."""
        ...


class HostMemory:
    """The process's resident memory (CPU backends): peak RSS from /proc."""

    def __init__(self) -> None:
        self._base = 0
        self._base_reclaimable = 0

    def free_bytes(self) -> int:
        import psutil

        return int(psutil.virtual_memory().available)

    def start_peak(self) -> None:
        # Garbage collected inside the window (an old session's buffers, freed by a cycle
        # collection that the measured decode's allocations set off) would lower RSS under
        # the base and hide part of the peak: collect it before the base is read.
        gc.collect()
        self._base = rss_bytes()
        self._base_reclaimable = reclaimable_rss_bytes()
        reset_peak_rss()

    def peak_bytes(self) -> int:
        # Under memory pressure the kernel reclaims resident pages the process did not free
        # itself (mapped files such as torch's and onnxruntime's libraries, and memory an
        # allocator released with MADV_FREE), lowering RSS under the base while the decode
        # runs. Adding back what left errs high, the safe side for a budget.
        reclaimed = max(0, self._base_reclaimable - reclaimable_rss_bytes())
        return max(0, peak_rss_bytes() - self._base + reclaimed)


class TorchCudaMemory:
    """torch's caching allocator on one GPU: exact peaks of torch's own tensors.

    `cuda` is `torch.cuda` or a fake with the same five functions.
    """

    def __init__(self, index: int, cuda: Any) -> None:
        self._index = index
        self._cuda = cuda
        self._base = 0

    def free_bytes(self) -> int:
        free, _total = self._cuda.mem_get_info(self._index)
        # Blocks torch has cached but not handed out are free for our activations too.
        cached = self._cuda.memory_reserved(self._index) - self._cuda.memory_allocated(self._index)
        return int(free + max(0, cached))

    def start_peak(self) -> None:
        self._base = int(self._cuda.memory_allocated(self._index))
        self._cuda.reset_peak_memory_stats(self._index)

    def peak_bytes(self) -> int:
        return max(0, int(self._cuda.max_memory_allocated(self._index)) - self._base)


class CudaDriverMemory:
    """Free memory as the driver reports it, which sees every allocator on the GPU.

    For onnxruntime, whose arena torch cannot see. The arena keeps what it grew to, so
    the drop in free memory after a decode is that decode's peak (or less, when the arena
    already held enough; calibration never lowers a scale for that reason).
    """

    def __init__(self, index: int, cuda: Any) -> None:
        self._index = index
        self._cuda = cuda
        self._base = 0

    def free_bytes(self) -> int:
        free, _total = self._cuda.mem_get_info(self._index)
        return int(free)

    def start_peak(self) -> None:
        self._base = self.free_bytes()

    def peak_bytes(self) -> int:
        return max(0, self._base - self.free_bytes())


class UnknownMemory:
    """A GPU whose memory nothing here can read (onnxruntime-gpu next to a CPU torch)."""

    def __init__(self, device: str) -> None:
        self._device = device

    def free_bytes(self) -> int:
        raise EngineError(f"cannot read free memory on {self._device}: pass --memory-budget")

    def start_peak(self) -> None:
        return None

    def peak_bytes(self) -> int:
        return 0  # no reading: calibration keeps the architecture's estimate


def device_memory(device: str, backend: str) -> DeviceMemory:
    """The reader that fits a device and backend."""
    if not device.startswith("cuda"):
        return HostMemory()
    cuda = _torch_cuda()
    if cuda is None:
        return UnknownMemory(device)
    index = device_index(device)
    if backend == "torch":
        return TorchCudaMemory(index, cuda)
    return CudaDriverMemory(index, cuda)


def _torch_cuda() -> Any | None:
    import torch

    return torch.cuda if torch.cuda.is_available() else None


def reset_peak_rss() -> None:
    # Linux: writing 5 to clear_refs resets VmHWM, so the next peak is this decode's.
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _status_kib(field_name: str, source: str = "/proc/self/status") -> int:
    try:
        for line in Path(source).read_text().splitlines():
            if line.startswith(field_name):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def rss_bytes() -> int:
    return _status_kib("VmRSS:")


def peak_rss_bytes() -> int:
    return _status_kib("VmHWM:")


def reclaimable_rss_bytes() -> int:
    """Resident pages the kernel may take back at any time: mapped files and lazily freed
    memory (MADV_FREE, which jemalloc-style allocators use)."""
    lazy = _status_kib("LazyFree:", "/proc/self/smaps_rollup")
    return _status_kib("RssFile:") + lazy
