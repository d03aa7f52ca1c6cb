"""Monitor: NVML parsing with a small fake NVML, and the process readings."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from engine.serving.monitor import (
    Monitor,
    cuda_to_nvml,
    cuda_uuids,
    read_gpus,
    summed,
    torch_memory,
)


class FakeNvml:
    """Two devices with fixed readings, answering like pynvml does."""

    def __init__(self) -> None:
        self.devices = [
            (b"NVIDIA H200", 10 << 30, 141 << 30, 37, 41, b"GPU-aaaa-0000"),
            ("NVIDIA H200", 20 << 30, 141 << 30, 99, 70, "GPU-bbbb-1111"),
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

    def nvmlDeviceGetUUID(self, handle: Any) -> Any:
        return handle[5]


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


class NVMLError(Exception):
    """pynvml's base error class is named this; its subclasses are made per return code."""


class NVMLError_NotSupported(NVMLError):  # pynvml's naming
    pass


class PartialNvml(FakeNvml):
    """Device 0 has no utilization or temperature (a MIG slice); device 1 is lost."""

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        if handle is self.devices[0]:
            raise NVMLError_NotSupported("not supported")
        return super().nvmlDeviceGetUtilizationRates(handle)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        if handle is self.devices[0]:
            raise NVMLError_NotSupported("not supported")
        return super().nvmlDeviceGetTemperature(handle, sensor)

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        if handle is self.devices[1]:
            raise NVMLError("GPU is lost")
        return super().nvmlDeviceGetMemoryInfo(handle)


def test_unsupported_readings_are_none_and_a_lost_device_is_left_out() -> None:
    gpus = read_gpus(PartialNvml())
    assert [g.index for g in gpus] == [0]
    assert gpus[0].utilization_pct is None and gpus[0].temperature_c is None
    assert gpus[0].memory_used == 10 << 30


def test_gauges_are_labelled_by_device_index_and_skip_missing_readings() -> None:
    registry = CollectorRegistry()
    snapshot = Monitor(registry, PartialNvml()).snapshot()
    assert [g["index"] for g in snapshot["gpus"]] == [0]
    text = generate_latest(registry).decode()
    assert 'gpu_memory_used_bytes{gpu="0"} 1.073741824e+10' in text
    assert 'gpu_utilization_percent{gpu="0"}' not in text
    assert 'gpu="1"' not in text


def test_other_errors_are_not_swallowed() -> None:
    class Broken(FakeNvml):
        def nvmlDeviceGetName(self, handle: Any) -> Any:
            raise KeyError("a bug, not an NVML condition")

    with pytest.raises(KeyError):
        read_gpus(Broken())


class FakeCuda:
    """torch.cuda's allocator functions for devices 0 and 1."""

    def current_device(self) -> int:
        return 0

    def memory_allocated(self, index: int) -> int:
        return 100 * (index + 1)

    def memory_reserved(self, index: int) -> int:
        return 1000 * (index + 1)

    def max_memory_allocated(self, index: int) -> int:
        return 500 * (index + 1)


def test_torch_memory_per_engine_device_and_summed() -> None:
    per_device = torch_memory([0, 1], FakeCuda())
    assert per_device == [
        {"index": 0, "allocated": 100, "reserved": 1000, "peak_allocated": 500},
        {"index": 1, "allocated": 200, "reserved": 2000, "peak_allocated": 1000},
    ]
    assert summed(per_device) == {"allocated": 300, "reserved": 3000}
    assert torch_memory(None, FakeCuda()) == per_device[:1]  # the current device
    assert summed(None) is None


def test_readings_follow_the_engines_gpu_under_cuda_visible_devices() -> None:
    # CUDA_VISIBLE_DEVICES=1: the engine's cuda:0 is the host's second GPU (NVML index 1).
    registry = CollectorRegistry()
    monitor = Monitor(registry, FakeNvml())
    monitor.follow({0: "bbbb-1111"})  # torch reports UUIDs without NVML's "GPU-" prefix
    gpus = monitor.snapshot([0])["gpus"]
    assert [(g["index"], g["nvml_index"]) for g in gpus] == [(0, 1)]
    assert gpus[0]["memory_used"] == 20 << 30 and gpus[0]["utilization_pct"] == 99
    text = generate_latest(registry).decode()
    assert 'gpu_utilization_percent{gpu="0"} 99.0' in text
    assert 'gpu="1"' not in text  # the GPU this process does not use is not read


def test_cuda_ordinals_map_by_uuid_and_unknown_ones_keep_their_number() -> None:
    nvml = FakeNvml()
    assert cuda_to_nvml(nvml, {0: "GPU-BBBB-1111", 1: "GPU-aaaa-0000"}) == {0: 1, 1: 0}
    assert cuda_to_nvml(nvml, {0: "", 1: "GPU-unknown"}) == {0: 0, 1: 1}
    props = {0: SimpleNamespace(uuid="bbbb-1111"), 1: SimpleNamespace()}
    cuda = SimpleNamespace(get_device_properties=props.__getitem__)
    assert cuda_uuids([0, 1], cuda) == {0: "bbbb-1111", 1: ""}
