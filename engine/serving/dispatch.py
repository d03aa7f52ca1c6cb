"""Which device takes the next batch: a pure policy over per-device load snapshots."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DeviceLoad:
    """One device's work at a moment: batches and padded frames in flight, work done."""

    index: int
    in_flight: int = 0
    in_flight_frames: int = 0
    frames_done: int = 0


def by_least_loaded(loads: Sequence[DeviceLoad], max_in_flight: int = 1) -> list[int]:
    """Devices that can take a batch now, least loaded first.

    Least loaded means fewest batches in flight, then fewest padded frames in flight (a
    proxy for the time until it frees up), then the least work done so far, which spreads
    work evenly when several devices are idle; the index breaks remaining ties.
    """
    if max_in_flight < 1:
        raise ValueError("max_in_flight must be at least 1")
    free = [d for d in loads if d.in_flight < max_in_flight]
    free.sort(key=lambda d: (d.in_flight, d.in_flight_frames, d.frames_done, d.index))
    return [d.index for d in free]
