"""Rounds pooled per arm, the mono-over-stereo ratios, the verdict, and the JSON document."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tools.bench.calls.load import MONO, STEREO
from tools.bench.calls.measure import ArmRun
from tools.bench.capacity.config import BenchConfig
from tools.bench.capacity.latency import Samples, judge, judged_final_latency, latency_of
from tools.bench.common.stats import Percentiles


@dataclass(frozen=True, slots=True)
class ArmSummary:
    """One arm at one load, every round's finals pooled."""

    arm: str
    calls: int
    rounds: int
    sessions: int
    channels: int
    utterances: int
    finals: int
    matched_utterances: int
    errors: int
    dropped_sessions: int
    protocol_problems: int
    final_after_vad_ms: Percentiles  # what the bound judges
    final_from_last_speech_ms: Percentiles
    vad_end_silence_ms: Percentiles
    first_partial_ms: Percentiles
    partial_interval_ms: Percentiles
    server_cpu_percent_mean: float | None  # 100 = one core; the mean of the rounds' means
    engine_busy_s: float | None  # summed over the rounds
    decoded_audio_s: dict[str, float]  # per request kind, summed over the rounds
    batches: int | None
    batch_size_mean: float | None
    passed: bool
    failed: tuple[str, ...]


def merged(samples: Sequence[Samples]) -> Samples:
    """Several runs' latency samples as one."""
    out = Samples()
    for s in samples:
        out.final += s.final
        out.vad_end_silence += s.vad_end_silence
        out.after_vad += s.after_vad
        out.first_partial += s.first_partial
        out.partial_gaps += s.partial_gaps
        out.send_lag += s.send_lag
        out.matched += s.matched
        out.extra += s.extra
        out.unmatched += s.unmatched
        out.without_partials += s.without_partials
    return out


def total(values: Sequence[float | None], digits: int = 1) -> float | None:
    """The sum of readings, None when the server gave none."""
    known = [v for v in values if v is not None]
    return round(sum(known), digits) if known else None


def pool(runs: Sequence[ArmRun], samples: Sequence[Samples], config: BenchConfig) -> ArmSummary:
    """Pool one arm's rounds: latency over all finals, the server's readings summed."""
    latency = latency_of(merged(samples), config.end_silence_ms)
    errors = sum(r.errors for r in runs)
    dropped = sum(r.dropped_sessions for r in runs)
    problems = sum(r.protocol_problem_count for r in runs)
    failed = list(judge(latency, errors, dropped, config.criteria))
    if problems:
        failed.append(f"{problems} protocol problem(s)")
    cpu = [r.server.cpu_percent_mean for r in runs if r.server.cpu_percent_mean is not None]
    batches = total([r.server.batches for r in runs], 0)
    sizes = [(r.server.batch_size_mean or 0) * (r.server.batches or 0) for r in runs]
    decoded: dict[str, float] = {}
    for r in runs:
        for kind, seconds in (r.server.decoded_audio_s or {}).items():
            decoded[kind] = round(decoded.get(kind, 0.0) + seconds, 1)
    return ArmSummary(
        arm=runs[0].arm,
        calls=runs[0].calls,
        rounds=len(runs),
        sessions=runs[0].sessions,
        channels=runs[0].channels,
        utterances=sum(r.utterances for r in runs),
        finals=sum(r.finals for r in runs),
        matched_utterances=sum(r.matched_utterances for r in runs),
        errors=errors,
        dropped_sessions=dropped,
        protocol_problems=problems,
        final_after_vad_ms=judged_final_latency(latency),
        final_from_last_speech_ms=latency.final_ms,
        vad_end_silence_ms=latency.vad_end_silence_ms,
        first_partial_ms=latency.first_partial_ms,
        partial_interval_ms=latency.partial_interval_ms,
        server_cpu_percent_mean=round(statistics.fmean(cpu), 1) if cpu else None,
        engine_busy_s=total([r.server.engine_busy_s for r in runs]),
        decoded_audio_s=decoded,
        batches=int(batches) if batches is not None else None,
        batch_size_mean=round(sum(sizes) / batches, 2) if batches else None,
        passed=not failed,
        failed=tuple(failed),
    )


def ratio(mono: float | None, stereo: float | None) -> float | None:
    """Mono over stereo (B/A), None when either is missing or the stereo reading is 0."""
    if mono is None or not stereo:
        return None
    return round(mono / stereo, 3)


def ratios(stereo: ArmSummary, mono: ArmSummary) -> dict[str, float | None]:
    """B/A for each figure the comparison reports: above 1, the mono streams cost more."""
    a, b = stereo, mono
    return {
        "final_after_vad_p50": ratio(b.final_after_vad_ms.p50, a.final_after_vad_ms.p50),
        "final_after_vad_p95": ratio(b.final_after_vad_ms.p95, a.final_after_vad_ms.p95),
        "first_partial_p95": ratio(b.first_partial_ms.p95, a.first_partial_ms.p95),
        "partial_gap_p95": ratio(b.partial_interval_ms.p95, a.partial_interval_ms.p95),
        "server_cpu_percent": ratio(b.server_cpu_percent_mean, a.server_cpu_percent_mean),
        "engine_busy_s": ratio(b.engine_busy_s, a.engine_busy_s),
        "decoded_audio_s": ratio(sum(b.decoded_audio_s.values()), sum(a.decoded_audio_s.values())),
        "finals": ratio(b.finals, a.finals),
    }


def paired_p95_ratios(runs: Sequence[ArmRun]) -> list[float | None]:
    """Each round's mono p95 over its stereo p95 (final after the VAD): the pairs that saw
    the same stretch of this machine's drift."""
    by_round: dict[int, dict[str, ArmRun]] = {}
    for r in runs:
        by_round.setdefault(r.round, {})[r.arm] = r
    return [
        ratio(
            judged_final_latency(pair[MONO].latency).p95,
            judged_final_latency(pair[STEREO].latency).p95,
        )
        for _, pair in sorted(by_round.items())
        if STEREO in pair and MONO in pair
    ]


def verdict(stereo: ArmSummary, mono: ArmSummary) -> dict[str, Any]:
    """Against docs/benchmarks.md's bounds: final p95 after the VAD, partial gap p95, errors."""
    return {
        "calls_within_bounds": stereo.passed,
        "mono_within_bounds": mono.passed,
        "calls_failed": list(stereo.failed),
        "mono_failed": list(mono.failed),
    }


def level(
    calls: int, runs: Sequence[ArmRun], samples: Sequence[Samples], config: BenchConfig
) -> dict[str, Any]:
    """One load level: both arms pooled, their ratios, the verdict, and every round."""
    arms = {}
    for arm in (STEREO, MONO):
        picked = [(r, s) for r, s in zip(runs, samples, strict=True) if r.arm == arm]
        arms[arm] = pool([r for r, _ in picked], [s for _, s in picked], config)
    return {
        "calls": calls,
        "channels": 2 * calls,
        STEREO: asdict(arms[STEREO]),
        MONO: asdict(arms[MONO]),
        "ratio_mono_over_stereo": ratios(arms[STEREO], arms[MONO]),
        "paired_final_p95_ratios": paired_p95_ratios(runs),
        "verdict": verdict(arms[STEREO], arms[MONO]),
        "runs": [asdict(r) for r in runs],
    }


def print_run(run: ArmRun) -> None:
    """One line per arm run on stderr."""
    lat = run.latency
    judged = judged_final_latency(lat)
    verdict_text = "pass" if run.passed else "FAIL: " + "; ".join(run.failed)
    print(
        f"  round {run.round} {run.arm:<6} calls={run.calls} sessions={run.sessions} "
        f"finals={run.finals}/{run.utterances} after VAD p50/p95={judged.p50}/{judged.p95} ms "
        f"first partial p95={lat.first_partial_ms.p95} gap p95={lat.partial_interval_ms.p95} "
        f"errors={run.errors} problems={run.protocol_problem_count} "
        f"cpu={run.server.cpu_percent_mean}% busy={run.server.engine_busy_s}s -> {verdict_text}",
        file=sys.stderr,
    )
