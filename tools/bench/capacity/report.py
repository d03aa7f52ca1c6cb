"""The benchmark's outputs: one line per run on stderr and the JSON document."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tools.bench.capacity.config import BenchConfig
from tools.bench.capacity.corpus import Clip
from tools.bench.capacity.latency import judged_final_latency
from tools.bench.capacity.run import RunResult
from tools.bench.common.output import machine


@dataclass(frozen=True, slots=True)
class TargetReport:
    """All runs against one server, and its capacity when searched."""

    name: str
    url: str
    command: tuple[str, ...] | None
    engine: dict[str, Any] | None
    end_silence_ms: int
    end_silence_source: str
    runs: tuple[RunResult, ...]
    capacity: int | None
    capacity_at_limit: bool  # the search stopped at --max-streams: capacity is at least this
    largest_passing_streams: int


def print_run(run: RunResult) -> None:
    """One summary line per run on stderr."""
    lat = run.latency
    judged = judged_final_latency(lat)
    verdict = "pass" if run.passed else "FAIL: " + "; ".join(run.failed)
    if any("server_full" in e for e in run.error_samples):
        verdict += " (server_full: raise the server's --max-sessions / --max-sessions-per-ip)"
    procs = ""
    if run.server_cpu is not None:
        procs = f" (own processes {run.server_cpu.cpu_percent}%, {len(run.server_cpu.processes)})"
    print(
        f"  N={run.streams:<4} finals={run.finals:<5} "
        f"final after VAD p50/p95/p99={judged.p50}/{judged.p95}/{judged.p99} ms  "
        f"VAD end-silence p50={lat.vad_end_silence_ms.p50} ms  "
        f"partial gap p95={lat.partial_interval_ms.p95} ms  errors={run.errors} "
        f"dropped={run.dropped_sessions}  server cpu={run.server.cpu_percent_mean}%{procs}  "
        f"client cpu={run.client.cpu_percent}%  -> {verdict}",
        file=sys.stderr,
    )


def capacity_ratio(reports: Sequence[TargetReport]) -> float | None:
    """Configured over baseline: capacities when searched, else the largest passing N."""
    by_name = {r.name: r for r in reports}
    configured, baseline = by_name.get("configured"), by_name.get("baseline")
    if configured is None or baseline is None:
        return None
    key = "capacity" if configured.capacity is not None else "largest_passing_streams"
    top, bottom = getattr(configured, key), getattr(baseline, key)
    return round(top / bottom, 2) if bottom else None


def build_report(
    reports: Sequence[TargetReport], config: BenchConfig, pool: Sequence[Clip]
) -> dict[str, Any]:
    """The JSON document: settings, pool, every server's runs, capacity ratio."""
    seconds = [c.seconds for c in pool]
    return {
        "config": asdict(config),
        "host": machine("cpus", "cpu", "python")
        | {"note": "cpu_percent: 100 = one core; gpu memory: device-wide NVML reading"},
        "pool": {
            "utterances": len(pool),
            "seconds_min": round(min(seconds), 2),
            "seconds_mean": round(sum(seconds) / len(seconds), 2),
            "seconds_max": round(max(seconds), 2),
        },
        "servers": {r.name: asdict(r) for r in reports},
        "capacity_ratio": capacity_ratio(reports),
    }
