"""Prometheus metrics of a gateway's remote engine, in a registry the caller owns."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class RemoteMetrics:
    """Replicas answering, calls made, owed requests sent again after a loss or failed
    for want of one."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.replicas = Gauge(
            "engine_remote_replicas", "Engine replicas this gateway is attached to", registry=r
        )
        self.queued = Gauge(
            "engine_queue_depth", "Requests waiting for a batch, on all replicas", registry=r
        )
        self.calls = Counter(
            "engine_remote_calls", "Calls to replicas, by kind", ["call"], registry=r
        )
        self.lost = Counter("engine_remote_replicas_lost", "Replicas lost mid-session", registry=r)
        self.resent = Counter(
            "engine_remote_resent_requests",
            "Owed requests handed to another replica after theirs was lost",
            registry=r,
        )
        self.failed = Counter(
            "engine_remote_failed_requests",
            "Owed requests failed with no replica attached and no room left to wait for one",
            ["kind"],
            registry=r,
        )
