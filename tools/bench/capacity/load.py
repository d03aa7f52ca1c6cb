"""Load generation: every planned client streams at real-time pace on one event loop."""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from sensestream.client import ClientError, Outcome, SessionOptions, converse
from tools.bench.capacity.config import BenchConfig
from tools.bench.capacity.corpus import FRAME_MS
from tools.bench.capacity.plan import StreamPlan
from tools.bench.capacity.scrape import Endpoint, Snapshot, is_idle, server_processes, snapshot
from tools.bench.common.proc_cpu import ProcessWatch, WindowCpu
from tools.stats import Reading, Stats, StatsSampler

START = {"type": "start", "sample_rate": 16000, "encoding": "pcm_s16le", "language": "auto"}
OPEN_TIMEOUT_S = 60.0  # a loaded server takes a while to answer a handshake

# (utt_id, start_ms, end_ms, arrival, decided_ms or None from an older server)
FinalSeen = tuple[int, float, float, float, float | None]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StreamLog:
    """What one client saw, in the form the analysis reads."""

    t0: float
    sent_at: tuple[float, ...]
    # (utt_id, arrival) of each live-text update: partials, and (`commit: "pauses"`)
    # committed text, which grows the caption as a partial does.
    partials: tuple[tuple[int, float], ...]
    finals: tuple[FinalSeen, ...]
    errors: tuple[str, ...]
    ended: bool


@dataclass(frozen=True, slots=True)
class LoadOutcome:
    """Raw material of one run, before analysis."""

    logs: tuple[StreamLog, ...]
    wall_s: float
    cpu_s: float
    before: Snapshot
    stats_samples: tuple[Stats, ...]
    # The server's processes' own CPU over the window (read from /proc: spawned servers).
    server_cpu: WindowCpu | None = None


def stream_log(outcome: Outcome, failure: ClientError | None) -> StreamLog:
    """The partial and final arrivals, errors and `end` of one client's session."""
    errors = [f"{e.get('code')}: {e.get('message')}" for e in outcome.of("error")]
    if failure is not None:
        errors.append(f"{failure.code}: {failure}")
    if not outcome.ended and not errors:
        errors.append(f"session closed without `end` (close code {outcome.close_code})")
    finals = [
        (e["utt_id"], e["start_ms"], e["end_ms"], t, e.get("decided_ms"))
        for e, t in outcome.timed("final")
    ]
    return StreamLog(
        t0=outcome.started_at,
        sent_at=tuple(outcome.sent_at),
        partials=live_text_updates(outcome),
        finals=tuple(finals),
        errors=tuple(errors),
        ended=outcome.ended,
    )


def live_text_updates(outcome: Outcome) -> tuple[tuple[int, float], ...]:
    """(utt_id, arrival) of every partial and committed event, in arrival order."""
    updates = [*outcome.timed("partial"), *outcome.timed("committed")]
    return tuple(sorted(((e["utt_id"], t) for e, t in updates), key=lambda u: u[1]))


async def live_session(
    endpoint: Endpoint,
    start: Mapping[str, Any],
    frames: Sequence[bytes],
    start_delay_s: float,
    drain_timeout_s: float,
) -> tuple[Outcome, ClientError | None]:
    """One live client: connect, start, stream at real time, stop, read until `end`."""
    await asyncio.sleep(start_delay_s)  # the ramp: clients join one after another
    options = SessionOptions(
        start=start,
        frame_s=FRAME_MS / 1000,
        speed=1.0,
        headers=endpoint.headers,
        open_timeout_s=OPEN_TIMEOUT_S,
        drain_timeout_s=drain_timeout_s,
        keepalive=False,
    )
    outcome = Outcome()
    try:
        await converse(endpoint.ws_url, frames, options, outcome)
    except ClientError as exc:
        return outcome, exc
    return outcome, None


async def run_stream(endpoint: Endpoint, plan: StreamPlan, drain_timeout_s: float) -> StreamLog:
    """One live client of the plan, and what it saw."""
    outcome, error = await live_session(
        endpoint, START, plan.frames, plan.start_delay_s, drain_timeout_s
    )
    return stream_log(outcome, error)


async def measured(
    endpoint: Endpoint,
    config: BenchConfig,
    clients: Callable[[], Awaitable[list[T]]],
    watch: ProcessWatch | None = None,
) -> tuple[list[T], LoadOutcome]:
    """Wait for the server to be idle, then run `clients()` while sampling /stats (and,
    with a `watch`, reading the server's processes' CPU over the same window).

    The outcome's logs are left empty for the caller, which knows its clients' results.
    """
    headers = endpoint.headers
    async with StatsSampler(endpoint.http_url, headers, config.stats_interval_s) as sampler:
        # Let the previous run's sessions and queue drain before this one starts.
        await sampler.until(lambda r: is_idle(r[-1].stats) if r else False, config.settle_timeout_s)
        before = await asyncio.to_thread(snapshot, endpoint)
        window = watch.begin(server_processes(before.stats)) if watch else None
        usage = resource.getrusage(resource.RUSAGE_SELF)
        started = time.monotonic()
        results = await clients()
        wall = time.monotonic() - started
        done = resource.getrusage(resource.RUSAGE_SELF)
        server_cpu = window.end() if window else None
        during = sampler.since(started)
    cpu = (done.ru_utime + done.ru_stime) - (usage.ru_utime + usage.ru_stime)
    return results, LoadOutcome((), wall, cpu, before, usable(during), server_cpu)


async def drive(
    endpoint: Endpoint,
    plans: Sequence[StreamPlan],
    config: BenchConfig,
    watch: ProcessWatch | None = None,
) -> LoadOutcome:
    """Every planned client against an idle server, with /stats sampled throughout."""

    async def clients() -> list[StreamLog]:
        runs = (run_stream(endpoint, p, config.drain_timeout_s) for p in plans)
        return list(await asyncio.gather(*runs))

    logs, outcome = await measured(endpoint, config, clients, watch)
    return replace(outcome, logs=tuple(logs))


def usable(readings: Sequence[Reading]) -> tuple[Stats, ...]:
    return tuple(r.stats for r in readings if r.stats is not None)


def run_loop(coro: Coroutine[Any, Any, T]) -> tuple[T, str]:
    """Run on uvloop when it is installed, else asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro), "asyncio"
    return uvloop.run(coro), "uvloop"


def raise_fd_limit() -> None:
    """One socket per stream: lift the soft open-files limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
