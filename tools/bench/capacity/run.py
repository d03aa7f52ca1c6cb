"""One run: N live streams against one server for the configured duration, analysed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tools.bench.capacity.config import BenchConfig
from tools.bench.capacity.corpus import Clip
from tools.bench.capacity.latency import (
    Latency,
    Samples,
    collect_stream,
    judge,
    latency_of,
)
from tools.bench.capacity.load import LoadOutcome, drive, run_loop
from tools.bench.capacity.plan import StreamPlan, plan_streams, speech_seconds
from tools.bench.capacity.scrape import Endpoint, snapshot
from tools.bench.capacity.server_load import ServerLoad, server_load
from tools.bench.common.proc_cpu import ProcessWatch, WindowCpu
from tools.bench.common.stats import Percentiles, percentiles


@dataclass(frozen=True, slots=True)
class ClientCost:
    """What the benchmark client itself spent."""

    cpu_s: float
    cpu_percent: float
    cpu_ms_per_stream_second: float
    send_lag_ms: Percentiles
    event_loop: str


@dataclass(frozen=True, slots=True)
class RunResult:
    """One load level against one server."""

    streams: int
    duration_s: float
    wall_s: float
    speech_ratio_actual: float
    utterances: int
    finals: int
    partials: int
    matched_utterances: int
    missed_utterances: int
    extra_finals: int
    unmatched_finals: int
    utterances_without_partials: int
    errors: int
    error_samples: tuple[str, ...]
    dropped_sessions: int
    latency: Latency
    client: ClientCost
    server: ServerLoad
    passed: bool
    failed: tuple[str, ...]
    # The server's processes' CPU from /proc over the window (spawned servers only).
    server_cpu: WindowCpu | None = None


def run_once(
    endpoint: Endpoint,
    streams: int,
    pool: Sequence[Clip],
    config: BenchConfig,
    watch: ProcessWatch | None = None,
) -> RunResult:
    """N live streams against the server for `duration_s`, analysed (`watch`: whose CPU
    to read from /proc over the run)."""
    plans = plan_streams(streams, pool, config)
    outcome, loop_name = run_loop(drive(endpoint, plans, config, watch))
    after = snapshot(endpoint)
    load = server_load(outcome.before, after, outcome.stats_samples)
    return analyse(plans, outcome, loop_name, load, config)


def analyse(
    plans: Sequence[StreamPlan],
    outcome: LoadOutcome,
    loop_name: str,
    load: ServerLoad,
    config: BenchConfig,
) -> RunResult:
    """Latency, client cost and the verdict of one run."""
    collected = Samples()
    for plan, log in zip(plans, outcome.logs, strict=True):
        collect_stream(plan, log, collected)
    errors = [e for log in outcome.logs for e in log.errors]
    dropped = sum(1 for log in outcome.logs if not log.ended)
    latency = latency_of(collected, config.end_silence_ms)
    stream_seconds = len(plans) * config.duration_s
    client = ClientCost(
        cpu_s=round(outcome.cpu_s, 3),
        cpu_percent=round(100 * outcome.cpu_s / outcome.wall_s, 1),
        cpu_ms_per_stream_second=round(1000 * outcome.cpu_s / stream_seconds, 3),
        send_lag_ms=percentiles(collected.send_lag),
        event_loop=loop_name,
    )
    utterances = sum(len(p.utterances) for p in plans)
    failed = judge(latency, len(errors), dropped, config.criteria)
    return RunResult(
        streams=len(plans),
        duration_s=config.duration_s,
        wall_s=round(outcome.wall_s, 2),
        speech_ratio_actual=round(speech_seconds(plans) / stream_seconds, 3),
        utterances=utterances,
        finals=sum(len(log.finals) for log in outcome.logs),
        partials=sum(len(log.partials) for log in outcome.logs),
        matched_utterances=collected.matched,
        missed_utterances=utterances - collected.matched,
        extra_finals=collected.extra,
        unmatched_finals=collected.unmatched,
        utterances_without_partials=collected.without_partials,
        errors=len(errors),
        error_samples=tuple(sorted(set(errors))[:10]),
        dropped_sessions=dropped,
        latency=latency,
        client=client,
        server=load,
        passed=not failed,
        failed=failed,
        server_cpu=outcome.server_cpu,
    )
