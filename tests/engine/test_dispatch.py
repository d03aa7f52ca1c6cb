"""Multi-device dispatch: the least-loaded policy, device lists, and per-device budgets."""

from __future__ import annotations

import numpy as np
import pytest

from engine.budget import Architecture, CostModel, MemoryBudget
from engine.devices import device_index, parse_devices
from engine.dispatch import DeviceLoad, by_least_loaded
from engine.errors import EngineError
from engine.scheduler import Scheduler, SchedulerConfig
from engine.types import DecodeOptions, InferenceRequest, RequestKind
from tests.engine.test_scheduler import frames_of

MIB = 1 << 20


def final(session: str, seconds: float, arrival: float = 0.0) -> InferenceRequest:
    audio = np.zeros(int(seconds * 16000), np.float32)
    return InferenceRequest(session, 0, RequestKind.FINAL, audio, DecodeOptions(), arrival)


def two_devices(first: int, second: int, max_batch: int = 4) -> Scheduler:
    return Scheduler(
        SchedulerConfig(max_batch=max_batch, max_wait_ms=10),
        MemoryBudget(first),
        CostModel(Architecture()),
        frames_of,
        more_budgets=[MemoryBudget(second)],
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
        MemoryBudget(1 << 30),
        CostModel(Architecture()),
        frames_of,
    )
    assert scheduler.budgets == (scheduler.budget,)
    scheduler.submit(final("a", 2.0), 0.0)
    batch = scheduler.next_batch(1.0)
    assert batch is not None and batch.device == 0
    scheduler.complete(batch)
    assert scheduler.budget.in_use == 0
