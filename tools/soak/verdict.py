"""The soak's verdict: the server's resources at rest after the load against at rest before.

Both ends are taken with no session open. A baseline taken under load would count the
load's own sockets and tasks as the norm, so a leak as large as the load would pass.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tools.stats import Reading

AT_REST_READINGS = 5  # RSS jumps for a moment with each batch in flight: a median of five


@dataclass(frozen=True, slots=True)
class Sample:
    """One /stats reading of the server's resources."""

    t: float
    rss: int
    fds: int
    threads: int
    tasks: int
    sessions: int

    @classmethod
    def of(cls, reading: Reading) -> Sample | None:
        """The resources in a reading (None when it had no usable /stats)."""
        stats = reading.stats
        if stats is None:
            return None
        process = stats.get("process") or {}
        return cls(
            t=reading.t,
            rss=int(process["rss_bytes"]),
            fds=int(process["open_fds"]),
            threads=int(process["threads"]),
            tasks=int(stats["asyncio_tasks"]),
            sessions=int(stats["sessions"]),
        )


@dataclass(frozen=True, slots=True)
class Level:
    """Resources at rest: medians over consecutive samples with no session open."""

    t: float  # when the first of them was taken
    rss: int
    fds: int
    threads: int
    tasks: int


def at_rest(
    samples: Sequence[Sample], since: float, count: int = AT_REST_READINGS
) -> list[Sample] | None:
    """The first `count` consecutive samples from `since` on with no session open."""
    run: list[Sample] = []
    for sample in samples:
        if sample.t < since:
            continue
        if sample.sessions:
            run = []
            continue
        run.append(sample)
        if len(run) == count:
            return run
    return None


def level(window: Sequence[Sample]) -> Level:
    """The medians of an at-rest window; a window with sessions open is refused."""
    if not window:
        raise ValueError("no samples to take a level from")
    busy = [s for s in window if s.sessions]
    if busy:
        raise ValueError(f"{busy[0].sessions} session(s) open at t={busy[0].t}: not at rest")

    def median(values: list[int]) -> int:
        return int(statistics.median(values))

    return Level(
        t=window[0].t,
        rss=median([s.rss for s in window]),
        fds=median([s.fds for s in window]),
        threads=median([s.threads for s in window]),
        tasks=median([s.tasks for s in window]),
    )


def rss_growth(baseline: Level, final: Level) -> float:
    return (final.rss - baseline.rss) / baseline.rss


def resource_checks(baseline: Level, final: Level, max_rss_growth: float) -> dict[str, bool]:
    """What must hold for the soak to pass, as far as the server's resources go."""
    return {
        "rss_growth_ok": rss_growth(baseline, final) < max_rss_growth,
        "fds_back": final.fds <= baseline.fds,
        "threads_back": final.threads <= baseline.threads,
        "tasks_back": final.tasks <= baseline.tasks,
    }
