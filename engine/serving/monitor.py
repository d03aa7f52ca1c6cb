"""Process and device readings for /stats and /metrics: RSS, NVML and torch memory."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import psutil
from prometheus_client import CollectorRegistry, Gauge

log = logging.getLogger("sensestream.engine")


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One device's NVML reading; None where the device does not report a value (MIG).

    `index` is the CUDA ordinal the engine uses (`cuda:N`) once the monitor follows the
    engine's devices, else NVML's own index; `nvml_index` is always NVML's.
    """

    index: int
    nvml_index: int
    name: str
    memory_used: int
    memory_total: int
    utilization_pct: int | None
    temperature_c: int | None


class Nvml(Protocol):
    """The part of pynvml (nvidia-ml-py) we use; tests pass a small fake."""

    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> Any: ...


def load_nvml() -> Nvml | None:
    """pynvml, initialised, or None where there is no NVIDIA driver or no package."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except (ImportError, OSError):
        return None
    except Exception as exc:
        if type(exc).__name__.startswith("NVMLError"):
            return None
        raise
    nvml: Nvml = pynvml
    return nvml


def is_nvml_error(exc: BaseException) -> bool:
    """pynvml raises NVMLError subclasses made at run time, one per return code."""
    return any(c.__name__ == "NVMLError" for c in type(exc).__mro__)


def read_gpus(nvml: Nvml, devices: Mapping[int, int] | None = None) -> list[GpuReading]:
    """NVML readings of `devices` (CUDA ordinal to NVML index), or of every device NVML
    sees, by NVML index; a device that errors is left out."""
    pairs = devices or {i: i for i in range(nvml.nvmlDeviceGetCount())}
    readings = []
    for index, nvml_index in pairs.items():
        reading = _read_gpu(nvml, index, nvml_index)
        if reading is not None:
            readings.append(reading)
    return readings


def cuda_to_nvml(nvml: Nvml, cuda_uuids: Mapping[int, str]) -> dict[int, int]:
    """NVML's index for each CUDA ordinal, matched by UUID.

    CUDA numbers only the devices CUDA_VISIBLE_DEVICES lets it see (and may order them
    differently); NVML numbers every device on the host. An ordinal whose UUID is unknown
    or unmatched keeps its own number, the best guess without one.
    """
    by_uuid: dict[str, int] = {}
    for nvml_index in range(nvml.nvmlDeviceGetCount()):
        try:
            uuid = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(nvml_index))
        except Exception as exc:
            if is_nvml_error(exc):
                continue
            raise
        by_uuid[_plain_uuid(uuid)] = nvml_index
    mapping: dict[int, int] = {}
    for cuda in sorted(cuda_uuids):
        found = by_uuid.get(_plain_uuid(cuda_uuids[cuda]))
        if found is None:
            log.warning(
                "cuda:%d: no NVML device with its UUID (MIG, or no torch CUDA); reading NVML "
                "device %d, which under CUDA_VISIBLE_DEVICES may be another GPU",
                cuda,
                cuda,
            )
        mapping[cuda] = cuda if found is None else found
    return mapping


def cuda_uuids(devices: Sequence[int], cuda: Any | None = None) -> dict[int, str]:
    """Each CUDA ordinal's device UUID from torch when it has CUDA ("" when unknown)."""
    if cuda is None:
        import sys

        torch = sys.modules.get("torch")
        cuda = torch.cuda if torch is not None and torch.cuda.is_available() else None
    if cuda is None:
        return dict.fromkeys(devices, "")
    return {i: str(getattr(cuda.get_device_properties(i), "uuid", "")) for i in devices}


def _plain_uuid(uuid: Any) -> str:
    text = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    text = text.strip().lower()
    return text.removeprefix("gpu-")


def _read_gpu(nvml: Nvml, index: int, nvml_index: int) -> GpuReading | None:
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(nvml_index)
        name = nvml.nvmlDeviceGetName(handle)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    except Exception as exc:
        if is_nvml_error(exc):
            return None  # lost or inaccessible: the other devices still report
        raise
    return GpuReading(
        index=index,
        nvml_index=nvml_index,
        name=name.decode() if isinstance(name, bytes) else str(name),
        memory_used=int(memory.used),
        memory_total=int(memory.total),
        utilization_pct=_optional(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
        # Sensor 0 is the die.
        temperature_c=_optional(lambda: nvml.nvmlDeviceGetTemperature(handle, 0)),
    )


def _optional(read: Callable[[], Any]) -> int | None:
    """A reading some devices do not support (MIG instances, some boards)."""
    try:
        return int(read())
    except Exception as exc:
        if is_nvml_error(exc):
            return None
        raise


def torch_memory(
    devices: Sequence[int] | None = None, cuda: Any | None = None
) -> list[dict[str, int]] | None:
    """CUDA allocator numbers per GPU when torch is loaded with CUDA (never imports it).

    Only the `devices` given (default: the current one) are read, since touching a GPU
    the engine does not use would give it a CUDA context.
    """
    if cuda is None:
        import sys

        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available():
            return None
        cuda = torch.cuda
    indices = list(devices) if devices else [int(cuda.current_device())]
    return [
        {
            "index": i,
            "allocated": int(cuda.memory_allocated(i)),
            "reserved": int(cuda.memory_reserved(i)),
            "peak_allocated": int(cuda.max_memory_allocated(i)),
        }
        for i in indices
    ]


def summed(per_device: list[dict[str, int]] | None) -> dict[str, int] | None:
    """Allocator totals over devices (the single-device shape /stats always had)."""
    if per_device is None:
        return None
    return {key: sum(d[key] for d in per_device) for key in ("allocated", "reserved")}


class Monitor:
    """Takes readings on demand and mirrors them into Prometheus gauges."""

    def __init__(self, registry: CollectorRegistry, nvml: Nvml | None = None) -> None:
        self._process = psutil.Process(os.getpid())
        self._nvml = nvml
        self._devices: dict[int, int] | None = None  # CUDA ordinal -> NVML index
        labels = ["gpu"]
        self._rss = Gauge("process_resident_memory_bytes_sensestream", "RSS", registry=registry)
        self._gpu_used = Gauge("gpu_memory_used_bytes", "NVML used", labels, registry=registry)
        self._gpu_total = Gauge("gpu_memory_total_bytes", "NVML total", labels, registry=registry)
        self._gpu_util = Gauge("gpu_utilization_percent", "NVML util", labels, registry=registry)
        self._gpu_temp = Gauge("gpu_temperature_celsius", "NVML temp", labels, registry=registry)

    def follow(self, uuids: Mapping[int, str]) -> None:
        """Read only the engine's GPUs (CUDA ordinal to UUID), labelled by CUDA ordinal."""
        if self._nvml is not None and uuids:
            self._devices = cuda_to_nvml(self._nvml, uuids)

    def snapshot(self, torch_devices: Sequence[int] | None = None) -> dict[str, Any]:
        """A JSON-ready reading, also pushed into the gauges (labelled by the `index`)."""
        rss = int(self._process.memory_info().rss)
        self._rss.set(rss)
        gpus = read_gpus(self._nvml, self._devices) if self._nvml is not None else []
        for g in gpus:
            label = str(g.index)
            self._gpu_used.labels(label).set(g.memory_used)
            self._gpu_total.labels(label).set(g.memory_total)
            if g.utilization_pct is not None:
                self._gpu_util.labels(label).set(g.utilization_pct)
            if g.temperature_c is not None:
                self._gpu_temp.labels(label).set(g.temperature_c)
        per_device = torch_memory(torch_devices)
        return {
            "rss_bytes": rss,
            "cpu_percent": self._process.cpu_percent(interval=None),
            "threads": self._process.num_threads(),
            "open_fds": self._process.num_fds(),
            "gpus": [asdict(g) for g in gpus],
            "torch_cuda": summed(per_device),
            "torch_cuda_devices": per_device,
        }
