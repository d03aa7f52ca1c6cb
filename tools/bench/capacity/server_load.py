"""What the server did during one run: batches, queue delay, CPU and memory."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tools.bench.capacity.scrape import Histogram, Snapshot, counter_value, decoded_by_kind
from tools.bench.common.stats import Percentiles
from tools.stats import Stats


@dataclass(frozen=True, slots=True)
class ServerLoad:
    """Server readings over one run (from /stats samples and /metrics deltas)."""

    batch_size_mean: float | None
    batch_size_distribution: dict[str, int] | None
    batches: int | None
    queue_delay_ms: Percentiles | None
    cpu_percent_mean: float | None
    cpu_percent_max: float | None
    rss_bytes_max: int | None
    gpu_memory_used_bytes_max: int | None
    torch_cuda_reserved_bytes_max: int | None
    partials_dropped: int | None
    stats_samples: int
    decoded_audio_s: dict[str, float] | None = None  # per request kind
    # Seconds the device spent on batches, and audio seconds decoded per busy second: the
    # engine's speed under this load, to hold against its speed alone (the batch curve).
    engine_busy_s: float | None = None
    busy_audio_s_per_s: float | None = None


def server_load(before: Snapshot, after: Snapshot, samples: Sequence[Stats]) -> ServerLoad:
    """Batch sizes and queue delay from /metrics deltas; CPU and memory from /stats samples."""
    batch = histogram_delta(before, after, "engine_batch_size")
    delay = histogram_delta(before, after, "engine_queue_delay_seconds")
    busy = histogram_delta(before, after, "engine_inference_seconds")
    busy_s = round(busy.total, 1) if busy else None
    decoded = decoded_by_kind(before.stats, after.stats)
    audio_s = sum(decoded.values()) if decoded else None
    procs = [s.get("process") or {} for s in samples]
    cpu = [float(p["cpu_percent"]) for p in procs if "cpu_percent" in p]
    rss = [int(p["rss_bytes"]) for p in procs if "rss_bytes" in p]
    gpu = [sum(int(g.get("memory_used", 0)) for g in p.get("gpus") or []) for p in procs]
    torch_mem = [int((p.get("torch_cuda") or {}).get("reserved", 0)) for p in procs]
    dropped = increase(
        counter_value(before.stats, "partials_dropped"),
        counter_value(after.stats, "partials_dropped"),
    )
    return ServerLoad(
        batch_size_mean=round(batch.total / batch.count, 2) if batch and batch.count else None,
        batch_size_distribution=batch_distribution(batch) if batch else None,
        batches=int(batch.count) if batch else None,
        queue_delay_ms=histogram_percentiles(delay) if delay else None,
        cpu_percent_mean=round(sum(cpu) / len(cpu), 1) if cpu else None,
        cpu_percent_max=round(max(cpu), 1) if cpu else None,
        rss_bytes_max=max(rss, default=0) or None,
        gpu_memory_used_bytes_max=max(gpu, default=0) or None,
        torch_cuda_reserved_bytes_max=max(torch_mem, default=0) or None,
        partials_dropped=dropped,
        stats_samples=len(samples),
        decoded_audio_s=decoded,
        engine_busy_s=busy_s,
        busy_audio_s_per_s=round(audio_s / busy_s, 2) if audio_s and busy_s else None,
    )


def increase(before: float | None, after: float | None) -> int | None:
    """How much a counter grew (None when either reading is missing)."""
    if before is None or after is None:
        return None
    return int(after - before)


def histogram_delta(before: Snapshot, after: Snapshot, name: str) -> Histogram | None:
    """What a histogram gained over the run (None when the server does not export it)."""
    if name not in after.histograms:
        return None
    return after.histograms[name].minus(before.histograms.get(name))


def batch_distribution(hist: Histogram) -> dict[str, int]:
    """Batches per bucket of the batch-size histogram, keyed '1', '2', '5-6', '>64'."""
    out: dict[str, int] = {}
    previous_bound, previous_cum = 0.0, 0.0
    for bound, cum in zip(hist.bounds, hist.cumulative, strict=True):
        if math.isinf(bound):
            key = f">{int(previous_bound)}"
        elif bound - previous_bound > 1:
            key = f"{int(previous_bound) + 1}-{int(bound)}"
        else:
            key = str(int(bound))
        if cum - previous_cum > 0:
            out[key] = int(cum - previous_cum)
        previous_bound, previous_cum = bound, cum
    return out


def histogram_percentiles(hist: Histogram) -> Percentiles:
    """Bucket-estimated percentiles of a seconds histogram, in milliseconds."""
    if hist.count <= 0:
        return Percentiles(0)

    def ms(q: float) -> float | None:
        value = hist.quantile(q)
        return None if value is None else round(value * 1000, 1)

    mean = round(hist.total / hist.count * 1000, 1)
    return Percentiles(int(hist.count), mean, ms(0.5), ms(0.95), ms(0.99), None)
