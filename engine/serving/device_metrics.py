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

    def add(self, device: str) -> None:
        """Create the device's series at zero, so they exist before its first batch."""
        for metric in (self.budget, self.in_use, self.in_flight, self.batches, self.busy):
            metric.labels(device)
