"""The two arms' clients: N stereo calls, or the same calls as 2N mono streams, driven live."""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tools.bench.config import BenchConfig
from tools.bench.load import LoadOutcome, live_session, stream_log, usable
from tools.bench.plan import Utterance
from tools.bench.scrape import Endpoint, is_idle, snapshot
from tools.bench_calls.audio import RATE
from tools.bench_calls.calls import LABELS, Call
from tools.client import ClientError, Outcome, multichannel_start
from tools.stats import StatsSampler

OPEN_TIMEOUT_S = 60.0  # a loaded server takes a while to answer a handshake
STEREO, MONO = "stereo", "mono"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Client:
    """One WebSocket session of an arm: its start message, frames and place in the ramp."""

    name: str
    start: Mapping[str, Any]
    frames: tuple[bytes, ...]
    start_delay_s: float
    # The utterances of each channel it carries (one entry for a mono stream).
    utterances: tuple[tuple[Utterance, ...], ...]


def stereo_start(index: int) -> dict[str, Any]:
    return multichannel_start(f"call-{index}", LABELS, RATE)


def mono_start(index: int, channel: int) -> dict[str, Any]:
    return {
        "type": "start",
        "sample_rate": RATE,
        "encoding": "mulaw",
        "stream_id": f"call-{index}-{LABELS[channel]}",
    }


def ramp_delay(index: int, count: int, config: BenchConfig) -> float:
    """Calls join one after another over the ramp, as tools.bench's streams do."""
    return min(config.ramp_s, config.duration_s / 4) * index / count


def stereo_clients(calls: Sequence[Call], config: BenchConfig) -> list[Client]:
    """Arm A: each call as one two-channel stream, μ-law interleaved sample by sample."""
    return [
        Client(
            f"call-{i}",
            stereo_start(i),
            call.stereo_frames,
            ramp_delay(i, len(calls), config),
            call.utterances,
        )
        for i, call in enumerate(calls)
    ]


def mono_clients(calls: Sequence[Call], config: BenchConfig) -> list[Client]:
    """Arm B: each channel of each call as its own mono stream, same audio, same pacing."""
    return [
        Client(
            f"call-{i}-{LABELS[c]}",
            mono_start(i, c),
            call.mono_frames(c),
            ramp_delay(i, len(calls), config),
            (call.utterances[c],),
        )
        for i, call in enumerate(calls)
        for c in range(len(call.channels))
    ]


@dataclass(frozen=True, slots=True)
class Seen:
    """What one client saw, and why it stopped early if it did."""

    outcome: Outcome
    failure: ClientError | None


async def run_client(endpoint: Endpoint, client: Client, drain_timeout_s: float) -> Seen:
    """Connect, start, stream at real time, stop, and read until `end` (or a failure)."""
    outcome, error = await live_session(
        endpoint, client.start, client.frames, client.start_delay_s, drain_timeout_s
    )
    return Seen(outcome, error)


async def drive(
    endpoint: Endpoint, clients: Sequence[Client], config: BenchConfig
) -> tuple[LoadOutcome, tuple[Seen, ...]]:
    """Wait for the server to be idle, then run every client while sampling /stats."""
    async with StatsSampler(endpoint.http_url, endpoint.headers, config.stats_interval_s) as s:
        # Let the previous run's sessions and queue drain before this one starts.
        await s.until(lambda r: is_idle(r[-1].stats) if r else False, config.settle_timeout_s)
        before = await asyncio.to_thread(snapshot, endpoint)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        started = time.monotonic()
        seen = await asyncio.gather(
            *(run_client(endpoint, c, config.drain_timeout_s) for c in clients)
        )
        wall = time.monotonic() - started
        done = resource.getrusage(resource.RUSAGE_SELF)
        during = s.since(started)
    cpu = (done.ru_utime + done.ru_stime) - (usage.ru_utime + usage.ru_stime)
    logs = tuple(stream_log(x.outcome, x.failure) for x in seen)
    return LoadOutcome(logs, wall, cpu, before, usable(during)), tuple(seen)


def run_on_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop when it is installed (as tools.bench does), else asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)
