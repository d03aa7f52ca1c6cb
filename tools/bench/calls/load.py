"""The two arms' clients: N stereo calls, or the same calls as 2N mono streams, driven live."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sensestream.client import ClientError, Outcome, multichannel_start
from tools.bench.calls.audio import RATE
from tools.bench.calls.calls import LABELS, Call
from tools.bench.capacity.config import BenchConfig
from tools.bench.capacity.load import LoadOutcome, live_session, measured, stream_log
from tools.bench.capacity.plan import Utterance
from tools.bench.capacity.scrape import Endpoint

OPEN_TIMEOUT_S = 60.0  # a loaded server takes a while to answer a handshake
STEREO, MONO = "stereo", "mono"


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
    """Calls join one after another over the ramp, as tools.bench.capacity's streams do."""
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
    """Every client against an idle server, with /stats sampled throughout."""

    async def run_all() -> list[Seen]:
        runs = (run_client(endpoint, c, config.drain_timeout_s) for c in clients)
        return list(await asyncio.gather(*runs))

    seen, outcome = await measured(endpoint, config, run_all)
    logs = tuple(stream_log(x.outcome, x.failure) for x in seen)
    return replace(outcome, logs=logs), tuple(seen)
