"""Multi-device dispatch: the least-loaded policy, device lists, per-device budgets, and
two devices on a fake clock with fake backends of declared cost and memory."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import EngineError
from engine.serving.budget import Architecture, CostModel, MemoryBudget
from engine.serving.devices import device_index, parse_devices
from engine.serving.dispatch import DeviceLoad, by_least_loaded
from engine.serving.scheduler import Batch, Scheduler, SchedulerConfig
from engine.types import DecodeOptions, InferenceRequest, RequestKind
from tests.engine.serving.test_scheduler import FakeBackend, frames_of

MIB = 1 << 20


def final(session: str, seconds: float, arrival: float = 0.0) -> InferenceRequest:
    audio = np.zeros(int(seconds * 16000), np.float32)
    return InferenceRequest(session, 0, RequestKind.FINAL, audio, DecodeOptions(), arrival)


def two_devices(first: int, second: int, max_batch: int = 4) -> Scheduler:
    return Scheduler(
        SchedulerConfig(max_batch=max_batch, max_wait_ms=10),
        [MemoryBudget(first), MemoryBudget(second)],
        CostModel(Architecture()),
        frames_of,
    )


def test_idle_devices_come_first_then_fewer_frames_then_less_work_done() -> None:
    loads = [
        DeviceLoad(0, in_flight=1, in_flight_frames=100),
        DeviceLoad(1, frames_done=500),
        DeviceLoad(2, frames_done=100),
        DeviceLoad(3, in_flight=1, in_flight_frames=50),
    ]
    assert by_least_loaded(loads, max_in_flight=1) == [2, 1]
    assert by_least_loaded(loads, max_in_flight=2) == [2, 1, 3, 0]


def test_busy_devices_are_not_offered_and_ties_go_to_the_lower_index() -> None:
    assert by_least_loaded([DeviceLoad(0, in_flight=1), DeviceLoad(1, in_flight=1)]) == []
    assert by_least_loaded([DeviceLoad(1), DeviceLoad(0)]) == [0, 1]
    with pytest.raises(ValueError):
        by_least_loaded([DeviceLoad(0)], max_in_flight=0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cpu", ("cpu",)),
        ("cuda", ("cuda",)),
        ("cuda:0,cuda:1", ("cuda:0", "cuda:1")),
        (" cuda:1 , cuda:3 ", ("cuda:1", "cuda:3")),
    ],
)
def test_device_lists_parse(text: str, expected: tuple[str, ...]) -> None:
    assert parse_devices(text) == expected


@pytest.mark.parametrize(
    "text", ["", "gpu", "cuda:0,cuda:0", "cuda,cuda:0", "cpu,cuda:0", "cuda:x"]
)
def test_bad_device_lists_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_devices(text)


def test_device_index() -> None:
    assert [device_index(d) for d in ("cpu", "cuda", "cuda:3")] == [0, 0, 3]


def test_each_device_spends_only_its_own_budget() -> None:
    scheduler = two_devices(1 << 30, 1 << 30)
    for i in range(8):
        scheduler.submit(final(f"s{i}", 5.0), 0.0)
    on_zero = scheduler.next_batch(1.0, device=0)
    on_one = scheduler.next_batch(1.0, device=1)
    assert on_zero is not None and on_one is not None
    assert (on_zero.device, on_one.device) == (0, 1)
    assert scheduler.budgets[0].in_use == on_zero.allocation.nbytes
    assert scheduler.budgets[1].in_use == on_one.allocation.nbytes
    scheduler.complete(on_one)
    assert scheduler.budgets[1].in_use == 0 and scheduler.budgets[0].in_use > 0
    scheduler.complete(on_zero)
    assert scheduler.budgets[0].in_use == 0


def test_work_too_big_for_one_device_waits_for_the_bigger_one() -> None:
    cost = CostModel(Architecture())
    need = cost.bytes(1, frames_of(10 * 16000))
    scheduler = two_devices(need // 2, need * 2)
    scheduler.submit(final("big", 10.0), 0.0)
    assert scheduler.next_batch(1.0, device=0) is None
    assert scheduler.take_rejected() == []  # not rejected: device 1 can take it
    batch = scheduler.next_batch(1.0, device=1)
    assert batch is not None and batch.device == 1


def test_work_too_big_for_every_device_is_rejected() -> None:
    scheduler = two_devices(4 * MIB, 4 * MIB)
    scheduler.submit(final("huge", 15.0), 0.0)
    assert scheduler.next_batch(1.0, device=1) is None
    assert [r.session_id for r in scheduler.take_rejected()] == ["huge"]


def test_start_up_check_uses_the_smallest_budget() -> None:
    cost = CostModel(Architecture())
    need = cost.bytes(1, frames_of(15 * 16000))
    with pytest.raises(EngineError, match="memory-budget"):
        two_devices(need * 4, need // 2).check_fits(15 * 16000)
    two_devices(need * 4, need).check_fits(15 * 16000)


def test_one_device_behaves_as_before() -> None:
    scheduler = Scheduler(
        SchedulerConfig(max_batch=4, max_wait_ms=10),
        [MemoryBudget(1 << 30)],
        CostModel(Architecture()),
        frames_of,
    )
    assert len(scheduler.budgets) == 1
    scheduler.submit(final("a", 2.0), 0.0)
    batch = scheduler.next_batch(1.0)
    assert batch is not None and batch.device == 0
    scheduler.complete(batch)
    assert scheduler.budgets[0].in_use == 0


def simulate_devices(
    scheduler: Scheduler, arrivals: list[InferenceRequest], backends: list[FakeBackend]
) -> tuple[list[InferenceRequest], list[InferenceRequest], list[int]]:
    """The AsyncEngine's dispatch on a fake clock: a free device, least loaded first, takes
    the next batch; each device runs one batch at a time for its declared duration.

    Returns (answered, errored, peak budget use per device).
    """
    pending = sorted(arrivals, key=lambda r: r.arrival)
    busy: list[tuple[float, Batch] | None] = [None] * len(backends)
    done = [0] * len(backends)
    now, answered, errored, peaks = 0.0, [], [], [0] * len(backends)
    while pending or scheduler.queued or any(busy):
        while pending and pending[0].arrival <= now:
            scheduler.submit(pending.pop(0), now)
        for i, slot in enumerate(busy):
            if slot is not None and slot[0] <= now:
                scheduler.complete(slot[1])
                answered += slot[1].requests
                done[i] += slot[1].frames * len(slot[1].requests)
                busy[i] = None
        scheduler.drop_stale(now)
        loads = [
            DeviceLoad(i, int(b is not None), 0 if b is None else b[1].frames, done[i])
            for i, b in enumerate(busy)
        ]
        for index in by_least_loaded(loads):
            batch = scheduler.next_batch(now, index)
            if batch is None:
                continue
            peaks[index] = max(peaks[index], scheduler.budgets[index].in_use)
            assert scheduler.budgets[index].in_use <= scheduler.budgets[index].total
            duration = backends[index].run(batch)
            if duration is None:  # out of memory: the halves go back in the queue
                scheduler.complete(batch)
                lone = scheduler.split_after_oom(batch)
                errored += [lone] if lone is not None else []
                continue
            busy[index] = (now + duration, batch)
        errored += scheduler.take_rejected()
        events = [b[0] for b in busy if b is not None]
        events += [pending[0].arrival] if pending else []
        wake = scheduler.next_wakeup()
        events += [wake] if wake is not None and wake > now else []
        if not events:
            if scheduler.queued and not any(busy):
                break  # nothing can ever run: left for the assertions to catch
            continue
        now = max(now, min(events))
    return answered, errored, peaks


@settings(max_examples=100, deadline=None)
@given(
    arrivals=st.lists(
        st.tuples(st.integers(0, 7), st.floats(0.3, 15.0), st.floats(0.0, 3.0)), max_size=50
    ),
    budgets_mb=st.tuples(st.integers(60, 400), st.integers(60, 400)),
)
def test_two_devices_keep_their_budgets_and_answer_every_final_once(
    arrivals: list[tuple[int, float, float]], budgets_mb: tuple[int, int]
) -> None:
    scheduler = two_devices(budgets_mb[0] << 20, budgets_mb[1] << 20, max_batch=6)
    requests = [
        InferenceRequest(
            f"s{s}",
            i,
            RequestKind.FINAL,
            np.zeros(int(sec * 16000), np.float32),
            DecodeOptions(),
            at,
        )
        for i, (s, sec, at) in enumerate(arrivals)
    ]
    backends = [FakeBackend(scheduler.cost, memory=b << 20) for b in budgets_mb]
    answered, errored, peaks = simulate_devices(scheduler, requests, backends)
    assert sorted(id(r) for r in answered + errored) == sorted(id(r) for r in requests)
    assert all(p <= b.total for p, b in zip(peaks, scheduler.budgets, strict=True))
    assert all(b.in_use == 0 for b in scheduler.budgets)


def test_the_faster_device_takes_more_batches_on_a_fake_clock() -> None:
    scheduler = two_devices(1 << 30, 1 << 30, max_batch=2)
    requests = [final(f"s{i}", 4.0, arrival=i * 0.01) for i in range(60)]
    slow = FakeBackend(scheduler.cost, memory=1 << 30, overhead=0.2)
    fast = FakeBackend(scheduler.cost, memory=1 << 30, overhead=0.02)
    answered, errored, _ = simulate_devices(scheduler, requests, [slow, fast])
    assert len(answered) == 60 and not errored
    assert len(fast.ran) > 3 * len(slow.ran) > 0
