"""The engine as the server sees it: `EngineClient`, and the snapshot /stats and /metrics read.

The server talks to this protocol only, never to a scheduler's internals, so the engine
can run in this process (`AsyncEngine`) or elsewhere (a Ray Serve replica behind a
client with the same methods).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from engine.types import InferenceRequest, InferenceResult


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """The engine's counters at one moment, for /stats (and the queue gauge of /metrics)."""

    queued: int
    partials_dropped: int
    batches: int
    max_batch: int
    mean_padding_efficiency: float
    oom_splits: int
    audio_s_by_kind: Mapping[str, float]  # every request kind, zero included
    budget_bytes: int
    in_use_bytes: int
    devices: tuple[Mapping[str, Any], ...]
    healthy: bool
    # The remote replicas that answer (none for an engine in this process).
    replicas: tuple[str, ...] = ()

    def to_stats(self) -> dict[str, Any]:
        """The engine's part of /stats."""
        return {
            "queue": {"depth": self.queued, "partials_dropped": self.partials_dropped},
            "batches": {
                "count": self.batches,
                "max_batch": self.max_batch,
                "mean_padding_efficiency": self.mean_padding_efficiency,
                "oom_splits": self.oom_splits,
                "audio_s_by_kind": dict(self.audio_s_by_kind),
            },
            "memory": {"budget_bytes": self.budget_bytes, "in_use_bytes": self.in_use_bytes},
            "devices": [dict(d) for d in self.devices],
            "healthy": self.healthy,
            "replicas": list(self.replicas),
        }


class EngineClient(Protocol):
    """Open a session's result queue, submit its requests, cancel it; report; start and stop."""

    def start(self) -> None: ...

    async def close(self, timeout: float | None = None) -> None: ...

    def open_session(
        self, session_id: str, results: asyncio.Queue[InferenceResult] | None = None
    ) -> asyncio.Queue[InferenceResult]:
        """The queue the session's results arrive on (`results`: share one across ids)."""
        ...

    def submit(self, request: InferenceRequest) -> None: ...

    def cancel(self, session_id: str) -> int:
        """Forget a session: drop its queued requests and any results still to come."""
        ...

    @property
    def healthy(self) -> bool: ...

    def snapshot(self) -> EngineSnapshot: ...


def open_channel(
    channels: dict[str, asyncio.Queue[InferenceResult]],
    session_id: str,
    results: asyncio.Queue[InferenceResult] | None = None,
) -> asyncio.Queue[InferenceResult]:
    """Register a session's result queue (`results`, or a new one) in an engine's channels;
    a session already open is a ValueError."""
    if session_id in channels:
        raise ValueError(f"session {session_id!r} is already open")
    channel: asyncio.Queue[InferenceResult] = asyncio.Queue() if results is None else results
    channels[session_id] = channel
    return channel
