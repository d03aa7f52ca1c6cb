"""Prometheus series per device, labelled `device="cuda:0"`, in the engine's registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class DeviceMetrics:
    """Budget, memory held, batches in flight and busy time of each device."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["device"]
        r = registry
        self.budget = Gauge(
            "engine_device_memory_budget_bytes", "Memory budget per device", labels, registry=r
        )
        self.in_use = Gauge(
            "engine_device_memory_in_use_bytes", "Budget held per device", labels, registry=r
        )
        self.in_flight = Gauge(
            "engine_device_batches_in_flight", "Batches running per device", labels, registry=r
        )
        self.batches = Counter(
            "engine_device_batches", "Batches run per device", labels, registry=r
        )
        self.busy = Counter(
            "engine_device_busy_seconds", "Time a device spent on batches", labels, registry=r
        )
