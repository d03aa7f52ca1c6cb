"""What every run of the capacity benchmark shares: the load's shape and the pass criteria."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Criteria:
    """What a run must meet to count towards capacity."""

    max_final_latency_ms: float = 1000.0  # p95, end-silence subtracted
    max_partial_interval_ms: float = 2000.0  # p95
    max_errors: int = 0


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Load shape and measurement settings shared by every run."""

    duration_s: float = 60.0
    speech_ratio: float = 0.5
    partial_interval_ms: int = 400
    end_silence_ms: int = 500
    ramp_s: float = 2.0
    drain_timeout_s: float = 120.0
    stats_interval_s: float = 2.0
    settle_timeout_s: float = 60.0
    seed: int = 0
    phrase_pause_ms: int = 0  # 0: each pool sentence said whole (tools.bench.capacity.corpus)
    criteria: Criteria = field(default_factory=Criteria)
