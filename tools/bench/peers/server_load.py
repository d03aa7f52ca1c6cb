"""A closed loop of whole utterances: N connections, each sending its next clip once the
previous one's text is back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tools.bench.peers.server_clients import SAMPLE_RATE, UtteranceClient


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What one load run measured."""

    wall_s: float
    audio_s: float
    latencies_s: tuple[float, ...]  # per utterance, from its first byte sent to its text
    texts: tuple[str, ...]

    @property
    def audio_s_per_s(self) -> float:
        return self.audio_s / self.wall_s

    def latency_percentile(self, q: float) -> float:
        return float(np.percentile(np.asarray(self.latencies_s), q))


def assignment(clips: int, connections: int, per_connection: int) -> list[list[int]]:
    """Which clips each connection sends, in order: consecutive runs, wrapping around."""
    return [
        [(k * per_connection + j) % clips for j in range(per_connection)]
        for k in range(connections)
    ]


async def _connection(
    make_client: Callable[[], UtteranceClient],
    clips: Sequence[np.ndarray],
    order: Sequence[int],
    out: list[tuple[int, float, str]],
) -> None:
    async with make_client() as client:
        for index in order:
            began = time.perf_counter()
            text = await client.decode(clips[index])
            out.append((index, time.perf_counter() - began, text))


async def closed_loop(
    make_client: Callable[[], UtteranceClient],
    clips: Sequence[np.ndarray],
    connections: int,
    per_connection: int,
) -> LoadResult:
    """Run every connection at once; the wall time ends with the last text."""
    done: list[tuple[int, float, str]] = []
    plan = assignment(len(clips), connections, per_connection)
    began = time.perf_counter()
    await asyncio.gather(*(_connection(make_client, clips, order, done) for order in plan))
    wall = time.perf_counter() - began
    audio = sum(len(clips[index]) for index, _, _ in done) / SAMPLE_RATE
    return LoadResult(
        wall, audio, tuple(latency for _, latency, _ in done), tuple(t for *_, t in done)
    )
