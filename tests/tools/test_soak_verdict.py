"""The soak's baseline is taken at rest: a leak as large as the load must not pass."""

from __future__ import annotations

import pytest

from tools.soak.verdict import Sample, at_rest, level, resource_checks
from tools.stats import Reading

MIB = 1 << 20


def sample(t: float, sessions: int, fds: int, tasks: int, rss_mib: int = 150) -> Sample:
    return Sample(t=t, rss=rss_mib * MIB, fds=fds, threads=9, tasks=tasks, sessions=sessions)


def recorded_timeline(final_fds: int, final_tasks: int) -> list[Sample]:
    """A soak's /stats timeline: warm-up under load, at rest, the load again, at rest.

    Under load 54 sessions hold 70 fds and 290 tasks; at rest the server holds 16 and 4.
    """
    warmup = [sample(t, 54, 70, 290) for t in range(0, 10)]
    settling = [sample(10, 3, 24, 20)]
    rest = [sample(t, 0, 16, 4) for t in range(11, 16)]
    load = [sample(t, 54, 70, 290, rss_mib=260) for t in range(16, 60)]
    after = [sample(t, 0, final_fds, final_tasks) for t in range(60, 65)]
    return warmup + settling + rest + load + after


def verdict(timeline: list[Sample], load_ended_at: float) -> dict[str, bool]:
    """What the soak computes: the first window at rest after each phase, then the checks.

    Each phase's last client has finished well before the server is at rest: the steady
    sessions finish their utterance and the server closes its handlers after that.
    """
    baseline = at_rest(timeline, since=4.5)  # the warm-up's short sessions were done at 4.5
    final = at_rest(timeline, since=load_ended_at)
    assert baseline is not None and final is not None
    return resource_checks(level(baseline), level(final), max_rss_growth=0.1)


def test_a_leak_of_the_loads_size_fails() -> None:
    """Old: the baseline (70 fds, 290 tasks) was read under load, so 54 leaked sockets
    and 286 leaked tasks after the load were 'back at the baseline'."""
    leaky = recorded_timeline(final_fds=70, final_tasks=290)
    checks = verdict(leaky, load_ended_at=55.5)
    assert not checks["fds_back"] and not checks["tasks_back"]
    assert checks["threads_back"] and checks["rss_growth_ok"]


def test_a_server_back_at_rest_passes() -> None:
    checks = verdict(recorded_timeline(final_fds=16, final_tasks=4), load_ended_at=55.5)
    assert all(checks.values()), checks


def test_the_window_waits_for_consecutive_samples_at_rest() -> None:
    timeline = recorded_timeline(final_fds=16, final_tasks=4)
    window = at_rest(timeline, since=0.0)
    assert window is not None
    assert [s.t for s in window] == [11, 12, 13, 14, 15]  # not the settling one (3 open)
    assert at_rest(timeline, since=61.0) is None  # only four samples left: not yet at rest
    interrupted = [sample(0, 0, 16, 4), sample(1, 1, 18, 9), *timeline[11:16]]
    assert [s.t for s in at_rest(interrupted, since=0.0) or []] == [11, 12, 13, 14, 15]


def test_a_level_under_load_is_refused() -> None:
    with pytest.raises(ValueError, match="54 session"):
        level(recorded_timeline(16, 4)[:5])


def test_levels_are_medians_so_one_batch_in_flight_does_not_count() -> None:
    window = [sample(t, 0, 16, 4, rss_mib=150) for t in range(5)]
    window[2] = sample(2, 0, 16, 4, rss_mib=270)  # a batch's buffers, for a moment
    assert level(window).rss == 150 * MIB


def test_a_sample_comes_from_a_stats_reading() -> None:
    stats = {
        "sessions": 2,
        "asyncio_tasks": 17,
        "process": {"rss_bytes": 5 * MIB, "open_fds": 21, "threads": 9},
    }
    assert Sample.of(Reading(3.5, stats)) == Sample(3.5, 5 * MIB, 21, 9, 17, 2)
    assert Sample.of(Reading(4.0, None)) is None
