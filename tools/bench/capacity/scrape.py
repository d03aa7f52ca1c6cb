"""What the benchmark reads off a server: /stats fields and /metrics histograms."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from sensestream.client import bearer
from tools.http import get, http_base
from tools.stats import Stats, read_stats


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a server takes streams and answers /stats and /metrics, and the key it wants."""

    ws_url: str
    http_url: str
    api_key: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, ws_url: str, http_url: str | None, api_key: str | None) -> Endpoint:
        """HTTP on the WebSocket's own host and port unless told otherwise."""
        return cls(ws_url, (http_url or http_base(ws_url)).rstrip("/"), api_key)

    @property
    def headers(self) -> dict[str, str]:
        """The Authorization header, when there is a key."""
        return bearer(self.api_key)

    def stats(self) -> Stats | None:
        return read_stats(self.http_url, self.headers)


@dataclass(frozen=True, slots=True)
class Histogram:
    """A Prometheus histogram: cumulative bucket counts by upper bound."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    total: float
    count: float

    def minus(self, before: Histogram | None) -> Histogram:
        if before is None or before.bounds != self.bounds:
            return self
        cumulative = tuple(a - b for a, b in zip(self.cumulative, before.cumulative, strict=True))
        return Histogram(
            self.bounds, cumulative, self.total - before.total, self.count - before.count
        )

    def quantile(self, q: float) -> float | None:
        """Linear interpolation inside the bucket, as Prometheus's histogram_quantile does."""
        if self.count <= 0:
            return None
        rank, lower, below = q * self.count, 0.0, 0.0
        for bound, cum in zip(self.bounds, self.cumulative, strict=True):
            if cum >= rank:
                if math.isinf(bound):
                    return lower
                inside = cum - below
                return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
            lower, below = bound, cum
        return lower


def get_histograms(endpoint: Endpoint) -> dict[str, Histogram]:
    """Every unlabelled histogram in /metrics, by family name (empty when unavailable)."""
    try:
        status, body = get(endpoint.http_url + "/metrics", headers=endpoint.headers)
    except OSError:
        return {}
    return parse_histograms(body) if status == 200 else {}


def parse_histograms(text: str) -> dict[str, Histogram]:
    """The histograms of a Prometheus text exposition, by family name."""
    found: dict[str, Histogram] = {}
    for family in text_string_to_metric_families(text):
        if family.type != "histogram":
            continue
        buckets: dict[float, float] = {}
        total = count = 0.0
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                buckets[float(sample.labels["le"])] = sample.value
            elif sample.name.endswith("_sum"):
                total = sample.value
            elif sample.name.endswith("_count"):
                count = sample.value
        bounds = tuple(sorted(buckets))
        found[family.name] = Histogram(bounds, tuple(buckets[b] for b in bounds), total, count)
    return found


def stats_end_silence(stats: Stats | None) -> int | None:
    """The server's end-silence when /stats exposes one (top level or one level down)."""
    if not stats:
        return None
    for scope in (stats, *(v for v in stats.values() if isinstance(v, dict))):
        value = scope.get("end_silence_ms")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    return None


def server_processes(stats: Stats | None) -> dict[int, str]:
    """The processes a multi-process server lists in /stats' `processes`, by pid: its
    supervisor, engines and workers (empty when it lists none: one process)."""
    listed = (stats or {}).get("processes")
    if not isinstance(listed, dict):
        return {}
    found: dict[int, str] = {}
    supervisor = _pid(listed.get("supervisor"))
    if supervisor is not None:
        found[supervisor] = "supervisor"
    for key, role in (("engines", "engine"), ("workers", "worker")):
        entries = listed.get(key)
        for entry in entries if isinstance(entries, list) else []:
            pid = _pid(entry.get("pid") if isinstance(entry, dict) else None)
            if pid is not None:
                found.setdefault(pid, role)
    return found


def _pid(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def counter_value(stats: Stats | None, name: str) -> float | None:
    """A counter from /stats' queue section (partials dropped), when present."""
    value = ((stats or {}).get("queue") or {}).get(name)
    return float(value) if isinstance(value, int | float) else None


def decoded_by_kind(before: Stats | None, after: Stats | None) -> dict[str, float] | None:
    """Audio seconds the server decoded per request kind between two readings."""
    first = ((before or {}).get("batches") or {}).get("audio_s_by_kind")
    last = ((after or {}).get("batches") or {}).get("audio_s_by_kind")
    if not isinstance(first, dict) or not isinstance(last, dict):
        return None
    return {kind: round(float(v) - float(first.get(kind, 0.0)), 1) for kind, v in last.items()}


def is_idle(stats: Stats | None) -> bool:
    """No session open and nothing queued (a server that does not say counts as idle)."""
    if stats is None:
        return True
    depth = (stats.get("queue") or {}).get("depth", 0)
    return bool(stats.get("sessions", 0) == 0 and depth == 0)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """/metrics histograms and /stats read together, at the edges of a run."""

    histograms: dict[str, Histogram]
    stats: Stats | None


def snapshot(endpoint: Endpoint) -> Snapshot:
    """Histograms first: reading /stats also restarts the server's cpu_percent interval."""
    histograms = get_histograms(endpoint)
    return Snapshot(histograms, endpoint.stats())
