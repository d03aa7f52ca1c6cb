"""One arm's run, analysed: finals per channel, latency, the protocol's channel fields."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sensestream.client import Outcome
from tools.bench.calls.load import Client, Seen
from tools.bench.capacity.config import BenchConfig
from tools.bench.capacity.latency import (
    Latency,
    Samples,
    collect_stream,
    judge,
    latency_of,
)
from tools.bench.capacity.load import LoadOutcome, StreamLog, stream_log
from tools.bench.capacity.plan import StreamPlan
from tools.bench.capacity.server_load import ServerLoad
from tools.bench.common.stats import Percentiles, percentiles

UTTERANCE_EVENTS = ("partial", "final")


@dataclass(frozen=True, slots=True)
class ArmRun:
    """One arm (stereo calls or mono streams) in one round."""

    arm: str
    calls: int
    round: int
    sessions: int  # WebSockets: one per call, or one per channel
    channels: int
    utterances: int
    finals: int
    partials: int
    matched_utterances: int
    extra_finals: int
    unmatched_finals: int
    utterances_without_partials: int
    errors: int
    error_samples: tuple[str, ...]
    dropped_sessions: int
    protocol_problem_count: int
    protocol_problems: tuple[str, ...]  # samples: channel/label/ready fields not as sent
    latency: Latency
    client_cpu_percent: float
    send_lag_ms: Percentiles
    server: ServerLoad
    wall_s: float
    passed: bool
    failed: tuple[str, ...]


def of_channel(outcome: Outcome, channel: int) -> Outcome:
    """The events of one channel of a multichannel session (and the session's own)."""
    keep = [
        (e, t)
        for e, t in zip(outcome.events, outcome.times, strict=True)
        if e["type"] not in UTTERANCE_EVENTS or e.get("channel") == channel
    ]
    return Outcome(
        events=[e for e, _ in keep],
        times=[t for _, t in keep],
        close_code=outcome.close_code,
        started_at=outcome.started_at,
        sent_at=outcome.sent_at,
    )


def channel_logs(client: Client, seen: Seen) -> list[StreamLog]:
    """One log per channel the client carried; errors and the end stay with the session."""
    if len(client.utterances) == 1:
        return [stream_log(seen.outcome, seen.failure)]
    return [
        replace(stream_log(of_channel(seen.outcome, c), None), errors=(), ended=True)
        for c in range(len(client.utterances))
    ]


def protocol_problems(client: Client, outcome: Outcome) -> list[str]:
    """Fields the server got wrong: `ready`'s layout, and each utterance event's channel
    and label (a multichannel stream's must name one; a mono stream's none)."""
    labels = client.start.get("channel_labels") or []
    problems = ready_problems(client.start, outcome)
    for event in outcome.events:
        if event["type"] not in UTTERANCE_EVENTS:
            continue
        channel, label = event.get("channel"), event.get("label")
        if not labels:
            if channel is not None:
                problems.append(f"{client.name}: mono {event['type']} has channel {channel}")
        elif not isinstance(channel, int) or not 0 <= channel < len(labels):
            problems.append(f"{client.name}: {event['type']} without a valid channel: {channel}")
        elif label != labels[channel]:
            problems.append(f"{client.name}: channel {channel} labelled {label!r}")
    return problems


def ready_problems(start: Mapping[str, Any], outcome: Outcome) -> list[str]:
    """`ready.config` must echo the start message's audio layout and stream id."""
    ready = outcome.of("ready")
    if not ready:
        return []  # a session refused before `ready` is counted among the errors
    config = ready[0].get("config") or {}
    return [
        f"ready.config.{key} is {config.get(key)!r}, sent {value!r}"
        for key, value in start.items()
        if key != "type" and config.get(key) != value
    ]


def analyse(
    clients: Sequence[Client],
    seen: Sequence[Seen],
    *,
    arm: str,
    calls: int,
    round_no: int,
    outcome: LoadOutcome,
    server: ServerLoad,
    config: BenchConfig,
) -> tuple[ArmRun, Samples]:
    """Latency over every channel of every client, the protocol checks, and the verdict."""
    samples = Samples()
    problems: list[str] = []
    for client, saw in zip(clients, seen, strict=True):
        for spoken, log in zip(client.utterances, channel_logs(client, saw), strict=True):
            collect_stream(StreamPlan(client.start_delay_s, (), spoken), log, samples)
        problems += protocol_problems(client, saw.outcome)
    errors = [e for log in outcome.logs for e in log.errors]
    dropped = sum(1 for log in outcome.logs if not log.ended)
    latency = latency_of(samples, config.end_silence_ms)
    failed = list(judge(latency, len(errors), dropped, config.criteria))
    if problems:
        failed.append(f"{len(problems)} protocol problem(s)")
    utterances = sum(len(u) for c in clients for u in c.utterances)
    run = ArmRun(
        arm=arm,
        calls=calls,
        round=round_no,
        sessions=len(clients),
        channels=sum(len(c.utterances) for c in clients),
        utterances=utterances,
        finals=sum(len(log.finals) for log in outcome.logs),
        partials=sum(len(log.partials) for log in outcome.logs),
        matched_utterances=samples.matched,
        extra_finals=samples.extra,
        unmatched_finals=samples.unmatched,
        utterances_without_partials=samples.without_partials,
        errors=len(errors),
        error_samples=tuple(sorted(set(errors))[:10]),
        dropped_sessions=dropped,
        protocol_problem_count=len(problems),
        protocol_problems=tuple(sorted(set(problems))[:10]),
        latency=latency,
        client_cpu_percent=round(100 * outcome.cpu_s / outcome.wall_s, 1),
        send_lag_ms=percentiles(samples.send_lag),
        server=server,
        wall_s=round(outcome.wall_s, 2),
        passed=not failed,
        failed=tuple(failed),
    )
    return run, samples
