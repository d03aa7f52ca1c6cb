"""What a gateway and a remote engine replica say to each other: plain picklable records.

A gateway sends each replica one `Tick` per turn of its loop, carrying every session's
new requests and cancellations at once, and keeps one `collect` call waiting per replica
for results. Sessions are named on the wire exactly as the gateway names them; a replica
keeps each gateway's sessions apart itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.client import EngineSnapshot
from engine.serving.builder import EngineReport
from engine.types import InferenceRequest, InferenceResult

#: The Serve application gateways attach to unless told another name.
DEFAULT_APP = "sensestream"
#: For a Ray cluster that stays on this machine (set before Ray is imported): bind to
#: 127.0.0.1 rather than the host's routable address, and send no usage stats.
LOCAL_CLUSTER_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


@dataclass(frozen=True, slots=True)
class Hello:
    """A replica introduces itself: its id (for pinning) and what its engine measured."""

    replica: str
    report: EngineReport


@dataclass(frozen=True, slots=True)
class Tick:
    """One gateway's cancellations and new requests for one replica, requests in
    submission order. A gateway drops a session's unsent requests when it cancels it, so
    the replica applies the cancellations first."""

    gateway: str
    requests: tuple[InferenceRequest, ...] = ()
    cancels: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.requests or self.cancels)


@dataclass(frozen=True, slots=True)
class Collected:
    """The results a replica had for one gateway, and its engine's counters."""

    replica: str
    results: tuple[InferenceResult, ...]
    snapshot: EngineSnapshot
