"""Process and device readings for /stats and /metrics: RSS, NVML and torch memory."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import psutil
from prometheus_client import CollectorRegistry, Gauge


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One device's NVML reading."""

    index: int
    name: str
    memory_used: int
    memory_total: int
    utilization_pct: int
    temperature_c: int


class Nvml(Protocol):
    """The part of pynvml (nvidia-ml-py) we use; tests pass a small fake."""

    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...


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


def read_gpus(nvml: Nvml) -> list[GpuReading]:
    """Every device NVML sees; gpu temperature sensor 0 is the die."""
    readings = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = nvml.nvmlDeviceGetName(handle)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        rates = nvml.nvmlDeviceGetUtilizationRates(handle)
        readings.append(
            GpuReading(
                index=index,
                name=name.decode() if isinstance(name, bytes) else str(name),
                memory_used=int(memory.used),
                memory_total=int(memory.total),
                utilization_pct=int(rates.gpu),
                temperature_c=int(nvml.nvmlDeviceGetTemperature(handle, 0)),
            )
        )
    return readings


def torch_memory() -> dict[str, int] | None:
    """CUDA allocator numbers when torch is already loaded and has CUDA (never imports it)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return {
        "allocated": int(torch.cuda.memory_allocated()),
        "reserved": int(torch.cuda.memory_reserved()),
    }


class Monitor:
    """Takes readings on demand and mirrors them into Prometheus gauges."""

    def __init__(self, registry: CollectorRegistry, nvml: Nvml | None = None) -> None:
        self._process = psutil.Process(os.getpid())
        self._nvml = nvml
        labels = ["gpu"]
        self._rss = Gauge("process_resident_memory_bytes_sensestream", "RSS", registry=registry)
        self._gpu_used = Gauge("gpu_memory_used_bytes", "NVML used", labels, registry=registry)
        self._gpu_total = Gauge("gpu_memory_total_bytes", "NVML total", labels, registry=registry)
        self._gpu_util = Gauge("gpu_utilization_percent", "NVML util", labels, registry=registry)
        self._gpu_temp = Gauge("gpu_temperature_celsius", "NVML temp", labels, registry=registry)

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready reading, also pushed into the gauges."""
        rss = int(self._process.memory_info().rss)
        self._rss.set(rss)
        gpus = read_gpus(self._nvml) if self._nvml is not None else []
        for g in gpus:
            label = str(g.index)
            self._gpu_used.labels(label).set(g.memory_used)
            self._gpu_total.labels(label).set(g.memory_total)
            self._gpu_util.labels(label).set(g.utilization_pct)
            self._gpu_temp.labels(label).set(g.temperature_c)
        return {
            "rss_bytes": rss,
            "cpu_percent": self._process.cpu_percent(interval=None),
            "threads": self._process.num_threads(),
            "open_fds": self._process.num_fds(),
            "gpus": [asdict(g) for g in gpus],
            "torch_cuda": torch_memory(),
        }
