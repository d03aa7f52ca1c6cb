"""Monitor: NVML parsing with a small fake NVML, and the process readings."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from engine.monitor import Monitor, read_gpus


class FakeNvml:
    """Two devices with fixed readings, answering like pynvml does."""

    def __init__(self) -> None:
        self.devices = [
            (b"NVIDIA H200", 10 << 30, 141 << 30, 37, 41),
            ("NVIDIA H200", 20 << 30, 141 << 30, 99, 70),
        ]

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return self.devices[index]

    def nvmlDeviceGetName(self, handle: Any) -> Any:
        return handle[0]

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        return SimpleNamespace(used=handle[1], total=handle[2], free=handle[2] - handle[1])

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        return SimpleNamespace(gpu=handle[3], memory=0)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        assert sensor == 0
        return int(handle[4])


def test_read_gpus_parses_every_device() -> None:
    gpus = read_gpus(FakeNvml())
    assert [g.name for g in gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert gpus[1].memory_used == 20 << 30 and gpus[1].utilization_pct == 99
    assert gpus[0].temperature_c == 41


def test_snapshot_and_gauges() -> None:
    registry = CollectorRegistry()
    snapshot = Monitor(registry, FakeNvml()).snapshot()
    assert snapshot["rss_bytes"] > 10 << 20
    assert len(snapshot["gpus"]) == 2
    text = generate_latest(registry).decode()
    assert 'gpu_utilization_percent{gpu="1"} 99.0' in text
    assert 'gpu_memory_total_bytes{gpu="0"}' in text


def test_no_nvml_means_no_gpus() -> None:
    snapshot = Monitor(CollectorRegistry(), None).snapshot()
    assert snapshot["gpus"] == []
