"""Prometheus metrics for the engine, in a registry owned by one engine (no globals)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class EngineMetrics:
    """The engine's counters, gauges and histograms."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.batch_size = Histogram(
            "engine_batch_size", "Requests per batch", buckets=BATCH_BUCKETS, registry=r
        )
        self.queue_delay = Histogram(
            "engine_queue_delay_seconds",
            "Time from a request's arrival to its batch's start",
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.inference = Histogram(
            "engine_inference_seconds",
            "Wall time of one batch on the device (frontend included)",
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.padding = Histogram(
            "engine_padding_efficiency",
            "Real frames over padded frames per batch",
            buckets=(0.25, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0),
            registry=r,
        )
        self.budget = Gauge("engine_memory_budget_bytes", "Memory budget", registry=r)
        self.in_use = Gauge("engine_memory_in_use_bytes", "Budget held by batches", registry=r)
        self.queued = Gauge("engine_queue_depth", "Requests waiting for a batch", registry=r)
        self.requests = Counter(
            "engine_requests", "Requests by kind and outcome", ["kind", "outcome"], registry=r
        )
        self.decoded_audio = Counter(
            "engine_decoded_audio_seconds",
            "Audio seconds sent to a device, by request kind",
            ["kind"],
            registry=r,
        )
        self.partials_dropped = Counter(
            "engine_partials_dropped", "Partials dropped (replaced, stale, overload)", registry=r
        )
        self.out_of_memory = Counter(
            "engine_out_of_memory_batches",
            "Batches that ran out of device memory, by what followed: split (its halves "
            "queued again) or failed (a lone request answered out_of_memory)",
            ["outcome"],
            registry=r,
        )
