"""Scheduler with a fake clock and a fake backend whose cost and memory are declared."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import EngineError
from engine.serving.budget import Architecture, CostModel, MemoryBudget, parse_size
from engine.serving.scheduler import Batch, Scheduler, SchedulerConfig
from engine.types import DecodeOptions, InferenceRequest, RequestKind

SR = 16000


def frames_of(samples: int) -> int:
    """LFR frames, as the real frontend counts them."""
    return 0 if samples < 400 else -(-(1 + (samples - 400) // 160) // 6)


def request(
    session: str, utt: int, kind: RequestKind, seconds: float, arrival: float
) -> InferenceRequest:
    audio = np.zeros(int(seconds * SR), np.float32)
    return InferenceRequest(session, utt, kind, audio, DecodeOptions(), arrival)


def make(
    max_batch: int = 8, budget: int = 1 << 30, wait_ms: float = 20.0, **kw: float
) -> Scheduler:
    config = SchedulerConfig(max_batch=max_batch, max_wait_ms=wait_ms, **kw)  # type: ignore[arg-type]
    return Scheduler(config, [MemoryBudget(budget)], CostModel(Architecture()), frames_of)


@dataclass
class FakeBackend:
    """Runs a batch in `overhead + per_frame * padded frames` seconds of fake time.

    Its real memory need is the cost model's raw estimate times `true_scale`; above
    `memory` bytes it raises out-of-memory, like a device would.
    """

    cost: CostModel
    memory: int
    overhead: float = 0.02
    per_frame: float = 0.0004
    true_scale: float = 1.0
    ran: list[Batch] = field(default_factory=list)

    def run(self, batch: Batch) -> float | None:
        need = self.cost.raw_bytes(len(batch.requests), batch.frames) * self.true_scale
        if need > self.memory:
            return None
        self.ran.append(batch)
        return self.overhead + self.per_frame * batch.frames * len(batch.requests)


def simulate(
    scheduler: Scheduler,
    arrivals: list[InferenceRequest],
    backend: FakeBackend,
    more_conservative_per_oom: int = 0,
) -> tuple[list[InferenceRequest], list[InferenceRequest], int]:
    """Drive the scheduler on a fake clock; returns (answered, errored, peak budget use).

    `more_conservative_per_oom` stands for out-of-memory errors on other devices, which
    grow the shared cost model between a split and the retry of its halves.
    """
    pending = sorted(arrivals, key=lambda r: r.arrival)
    now, answered, errored, peak = 0.0, [], [], 0
    for _ in range(100_000):  # a stalled queue fails here instead of hanging the suite
        if not (pending or scheduler.queued):
            break
        while pending and pending[0].arrival <= now:
            scheduler.submit(pending.pop(0), now)
        scheduler.drop_stale(now)
        batch = scheduler.next_batch(now)
        rejected = scheduler.take_rejected()
        errored += rejected
        if batch is None and rejected:
            continue  # progress: ask again at once, as the engine's dispatch loop does
        if batch is None:
            wake = scheduler.next_wakeup()
            options = [t for t in (wake, pending[0].arrival if pending else None) if t is not None]
            if not options:
                break
            if min(options) <= now and not pending:
                raise AssertionError(f"nothing runs, {scheduler.queued} queued, none rejected")
            now = max(now, min(options))
            continue
        peak = max(peak, scheduler.budgets[0].in_use)
        assert scheduler.budgets[0].in_use <= scheduler.budgets[0].total
        duration = backend.run(batch)
        scheduler.complete(batch)
        if duration is None:
            for _ in range(more_conservative_per_oom):
                scheduler.cost.be_more_conservative()
            lone = scheduler.split_after_oom(batch)
            if lone is not None:
                errored.append(lone)
            continue
        answered += batch.requests
        now += duration
    else:
        raise AssertionError(f"the queue stalled with {scheduler.queued} queued")
    return answered, errored, peak


arrival_strategy = st.lists(
    st.tuples(
        st.integers(0, 5),  # session
        st.integers(0, 3),  # utterance
        st.booleans(),  # final?
        st.floats(0.3, 15.0),  # seconds of audio
        st.floats(0.0, 3.0),  # arrival time
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(arrivals=arrival_strategy, max_batch=st.integers(1, 12), budget_mb=st.integers(40, 400))
def test_budget_holds_and_every_final_is_answered_once(
    arrivals: list[tuple[int, int, bool, float, float]], max_batch: int, budget_mb: int
) -> None:
    scheduler = make(max_batch=max_batch, budget=budget_mb << 20)
    reqs, seen = [], set()
    for session, utt, final, seconds, at in arrivals:
        key = (f"s{session}", utt, final)
        if key in seen:
            continue  # one final per utterance, as sessions send
        seen.add(key)
        kind = RequestKind.FINAL if final else RequestKind.PARTIAL
        reqs.append(request(f"s{session}", utt, kind, seconds, at))
    fits = [r for r in reqs if scheduler.cost.bytes(1, frames_of(r.num_samples)) <= budget_mb << 20]
    backend = FakeBackend(scheduler.cost, memory=budget_mb << 20)
    answered, errored, peak = simulate(scheduler, reqs, backend)
    assert peak <= scheduler.budgets[0].total
    finals = Counter(id(r) for r in answered + errored if r.kind is RequestKind.FINAL)
    expected = {id(r) for r in reqs if r.kind is RequestKind.FINAL}
    assert set(finals) == expected and all(n == 1 for n in finals.values())
    assert all(id(r) in {id(x) for x in fits} for r in answered)
    for batch in backend.ran:
        assert len(batch.requests) <= max_batch
        assert len({id(r) for r in batch.requests}) == len(batch.requests)


def test_finals_never_starve_under_a_flood_of_partials() -> None:
    scheduler = make(max_batch=4)
    flood = [
        request(f"s{s}", 0, RequestKind.PARTIAL, 2.0, t / 100)
        for t in range(300)
        for s in range(10)
    ]
    final = request("late", 7, RequestKind.FINAL, 3.0, 1.0)
    backend = FakeBackend(scheduler.cost, memory=1 << 40)
    answered, _, _ = simulate(scheduler, [*flood, final], backend)
    assert final in answered
    started = next(b.formed_at for b in backend.ran if final in b.requests)
    first_after = min(b.formed_at for b in backend.ran if b.formed_at >= 1.0)
    assert started == first_after  # the very next batch after it arrived


def test_newer_partial_replaces_queued_one_and_final_drops_partials() -> None:
    scheduler = make(max_batch=8)
    p1 = request("a", 0, RequestKind.PARTIAL, 1.0, 0.0)
    p2 = request("a", 0, RequestKind.PARTIAL, 1.4, 0.001)
    other = request("b", 0, RequestKind.PARTIAL, 1.0, 0.002)
    assert scheduler.submit(p1, 0.0) == []
    assert scheduler.submit(p2, 0.001) == [p1]
    assert scheduler.submit(other, 0.002) == []
    final = request("a", 0, RequestKind.FINAL, 2.0, 0.003)
    assert scheduler.submit(final, 0.003) == [p2]
    batch = scheduler.next_batch(1.0)
    assert batch is not None
    assert set(map(id, batch.requests)) == {id(final), id(other)}
    assert scheduler.stats.partials_dropped == 2
    # Only what reached the device counts as decoded audio, by kind.
    assert scheduler.stats.samples_by_kind == {"final": 2 * SR, "partial": SR}


def test_a_replaced_partial_keeps_its_place_in_line() -> None:
    # One request per batch, a fresh partial from every client each time round: if a newer
    # partial went to the back of the line, client "a" would never be served.
    scheduler = make(max_batch=1, wait_ms=0)
    served: list[str] = []
    for step in range(6):
        now = step * 0.1
        for client in ("a", "b", "c"):
            scheduler.submit(request(client, 0, RequestKind.PARTIAL, 1.0 + step, now), now)
        batch = scheduler.next_batch(now)
        assert batch is not None
        served.append(batch.requests[0].session_id)
        scheduler.complete(batch)
    assert served[:3] == ["a", "b", "c"] and served[3:] == ["a", "b", "c"]
    assert scheduler.stats.partials_replaced > 0


def test_stale_partials_are_dropped_but_finals_are_not() -> None:
    scheduler = make(partial_stale_ms=500)
    old = request("a", 0, RequestKind.PARTIAL, 1.0, 0.0)
    final = request("b", 0, RequestKind.FINAL, 1.0, 0.0)
    scheduler.submit(old, 0.0)
    scheduler.submit(final, 0.0)
    assert scheduler.drop_stale(0.6) == [old]
    batch = scheduler.next_batch(0.6)
    assert batch is not None and batch.requests == (final,)


def test_max_wait_is_a_deadline_from_the_oldest_request() -> None:
    scheduler = make(max_batch=4, wait_ms=50)
    scheduler.submit(request("a", 0, RequestKind.FINAL, 1.0, 10.0), 10.0)
    assert scheduler.next_wakeup() == pytest.approx(10.05)
    assert scheduler.next_batch(10.049) is None
    scheduler.submit(request("b", 0, RequestKind.FINAL, 1.0, 10.03), 10.03)
    assert scheduler.next_wakeup() == pytest.approx(10.05)  # still the oldest's deadline
    batch = scheduler.next_batch(10.05)
    assert batch is not None and len(batch.requests) == 2


def test_a_full_batch_leaves_at_once() -> None:
    scheduler = make(max_batch=3, wait_ms=1000)
    for i in range(2):
        scheduler.submit(request(f"s{i}", 0, RequestKind.FINAL, 1.0, 0.0), 0.0)
    assert scheduler.next_batch(0.0) is None  # not full: it waits for the deadline
    scheduler.submit(request("s2", 0, RequestKind.FINAL, 1.0, 0.0), 0.0)
    batch = scheduler.next_batch(0.0)  # full: it leaves 1 s before its deadline
    assert batch is not None and len(batch.requests) == 3
    assert scheduler.queued == 0


def test_finals_fill_a_batch_before_partials() -> None:
    # The partials are closer in length to the anchor, but every final goes first.
    scheduler = make(max_batch=3, wait_ms=0)
    scheduler.submit(request("a", 0, RequestKind.FINAL, 10.0, 0.0), 0.0)
    for i in range(2):
        scheduler.submit(request(f"p{i}", 0, RequestKind.PARTIAL, 10.0, 0.0), 0.0)
    scheduler.submit(request("b", 0, RequestKind.FINAL, 2.0, 0.0), 0.0)
    scheduler.submit(request("c", 0, RequestKind.FINAL, 3.0, 0.0), 0.0)
    batch = scheduler.next_batch(0.0)
    assert batch is not None
    assert {r.session_id for r in batch.requests} == {"a", "b", "c"}


def test_live_finals_go_before_a_replays_older_ones() -> None:
    # A replay's four finals queued first; a live stream's final arrives after them and is
    # in the first batch, though the replay's are older and closer in length to each other.
    scheduler = make(max_batch=2, wait_ms=0)
    for i in range(4):
        bulk = request("replay", i, RequestKind.FINAL, 4.0, i * 0.01)
        scheduler.submit(replace(bulk, bulk=True), 0.05)
    scheduler.submit(request("live", 0, RequestKind.FINAL, 1.0, 0.1), 0.1)
    first = scheduler.next_batch(0.1)
    assert first is not None
    assert [r.session_id for r in first.requests].count("live") == 1
    rest = [scheduler.next_batch(0.1 + i) for i in range(1, 3)]
    ran = [r.utterance_id for b in rest if b is not None for r in b.requests]
    # The replay's finals all run, in their own order, filling the batches.
    assert sorted(ran + [r.utterance_id for r in first.requests if r.session_id != "live"]) == [
        0,
        1,
        2,
        3,
    ]


def test_a_bulk_final_waits_no_longer_than_max_wait_for_its_batch() -> None:
    scheduler = make(max_batch=8, wait_ms=20)
    bulk = request("replay", 0, RequestKind.FINAL, 2.0, 0.0)
    scheduler.submit(replace(bulk, bulk=True), 0.0)
    scheduler.submit(request("live", 0, RequestKind.FINAL, 2.0, 0.015), 0.015)
    assert scheduler.next_wakeup() == pytest.approx(0.02)  # the replay's is the oldest
    batch = scheduler.next_batch(0.02)
    assert batch is not None and len(batch.requests) == 2


def test_batches_are_length_sorted_and_close_in_length() -> None:
    scheduler = make(max_batch=3, wait_ms=0)
    lengths = [10.0, 1.0, 9.5, 2.0, 9.0, 1.5]
    for i, seconds in enumerate(lengths):
        scheduler.submit(request(f"s{i}", 0, RequestKind.FINAL, seconds, i * 0.001), 0.01)
    first = scheduler.next_batch(1.0)
    assert first is not None
    assert [r.num_samples / SR for r in first.requests] == [9.0, 9.5, 10.0]
    assert first.padding_efficiency > 0.9


def test_oom_splits_the_batch_and_nothing_is_lost() -> None:
    scheduler = make(max_batch=8, wait_ms=0)
    reqs = [request(f"s{i}", 0, RequestKind.FINAL, 5.0, 0.0) for i in range(8)]
    one = scheduler.cost.raw_bytes(1, frames_of(5 * SR))
    backend = FakeBackend(scheduler.cost, memory=int(2.5 * one))  # device fits 2 at a time
    answered, errored, _ = simulate(scheduler, reqs, backend)
    assert sorted(map(id, answered)) == sorted(map(id, reqs)) and not errored
    assert scheduler.stats.oom_splits >= 2
    assert scheduler.cost.scale > 1.0  # more conservative from now on


def test_a_request_too_big_even_alone_gets_an_error_and_others_go_on() -> None:
    scheduler = make(max_batch=4, wait_ms=0)
    big = request("big", 0, RequestKind.FINAL, 14.0, 0.0)
    small = [request(f"s{i}", 0, RequestKind.FINAL, 1.0, 0.0) for i in range(3)]
    limit = scheduler.cost.raw_bytes(3, frames_of(SR)) * 1.2
    answered, errored, _ = simulate(
        scheduler, [big, *small], FakeBackend(scheduler.cost, int(limit))
    )
    assert errored == [big]
    assert sorted(map(id, answered)) == sorted(map(id, small))


def test_retries_no_budget_can_hold_are_rejected_and_fresh_work_runs() -> None:
    scheduler = make(max_batch=4, wait_ms=0, budget=96 << 20)
    for i in range(4):
        scheduler.submit(request(f"s{i}", 0, RequestKind.FINAL, 10.0, 0.0), 0.0)
    batch = scheduler.next_batch(0.0)
    assert batch is not None and len(batch.requests) == 4
    scheduler.complete(batch)
    assert scheduler.split_after_oom(batch) is None  # two retry groups of two
    for _ in range(6):
        scheduler.cost.be_more_conservative()  # more out-of-memory errors elsewhere
    fresh = request("fresh", 0, RequestKind.FINAL, 0.5, 0.1)
    scheduler.submit(fresh, 0.1)
    one_long = scheduler.cost.bytes(1, frames_of(10 * SR))
    assert one_long > scheduler.budgets[0].total  # no budget can hold a retried request now
    served = scheduler.next_batch(0.2)
    rejected = scheduler.take_rejected()
    assert sorted(r.session_id for r in rejected) == ["s0", "s1", "s2", "s3"]
    assert served is not None and [r.session_id for r in served.requests] == ["fresh"]


@settings(max_examples=120, deadline=None)
@given(
    arrivals=arrival_strategy,
    max_batch=st.integers(1, 12),
    budget_mb=st.integers(40, 400),
    true_scale=st.floats(1.0, 12.0),
    memory_share=st.floats(0.2, 1.0),
    elsewhere=st.integers(0, 4),
)
def test_every_final_is_answered_once_whatever_runs_out_of_memory(
    arrivals: list[tuple[int, int, bool, float, float]],
    max_batch: int,
    budget_mb: int,
    true_scale: float,
    memory_share: float,
    elsewhere: int,
) -> None:
    # The device needs `true_scale` times what the cost model says and has only a share
    # of the budget: out-of-memory errors come in random sequences, and each makes the
    # cost model more conservative, until requests no longer fit at all.
    scheduler = make(max_batch=max_batch, budget=budget_mb << 20)
    reqs, seen = [], set()
    for session, utt, final, seconds, at in arrivals:
        if (session, utt, final) not in seen:
            seen.add((session, utt, final))
            kind = RequestKind.FINAL if final else RequestKind.PARTIAL
            reqs.append(request(f"s{session}", utt, kind, seconds, at))
    memory = int(memory_share * (budget_mb << 20))
    backend = FakeBackend(scheduler.cost, memory=memory, true_scale=true_scale)
    answered, errored, peak = simulate(scheduler, reqs, backend, elsewhere)
    assert peak <= scheduler.budgets[0].total
    finals = Counter(id(r) for r in answered + errored if r.kind is RequestKind.FINAL)
    expected = {id(r) for r in reqs if r.kind is RequestKind.FINAL}
    assert set(finals) == expected and all(n == 1 for n in finals.values())
    assert not {id(r) for r in answered} & {id(r) for r in errored}
    assert scheduler.queued == 0


def test_cancel_removes_everything_a_session_queued() -> None:
    scheduler = make()
    for utt in range(3):
        scheduler.submit(request("gone", utt, RequestKind.FINAL, 1.0, 0.0), 0.0)
    scheduler.submit(request("gone", 9, RequestKind.PARTIAL, 1.0, 0.0), 0.0)
    scheduler.submit(request("stays", 0, RequestKind.FINAL, 1.0, 0.0), 0.0)
    assert len(scheduler.cancel("gone")) == 4
    assert scheduler.queued == 1


def test_budget_too_small_for_one_max_segment_refuses_to_start() -> None:
    scheduler = make(budget=1 << 20)
    with pytest.raises(EngineError, match="memory-budget"):
        scheduler.check_fits(15 * SR)
    make(budget=1 << 30).check_fits(15 * SR)


def test_overload_drops_oldest_partials_first_and_finals_always_queue() -> None:
    scheduler = make(max_queued_partials=4)
    for i in range(6):
        scheduler.submit(request(f"s{i}", 0, RequestKind.PARTIAL, 1.0, i * 0.01), 0.0)
    for i in range(10):
        scheduler.submit(request(f"f{i}", 0, RequestKind.FINAL, 1.0, 0.1), 0.1)
    assert scheduler.queued == 14
    assert scheduler.stats.partials_overflow == 2


@pytest.mark.parametrize(
    ("text", "value"), [("4GiB", 4 << 30), ("512MiB", 512 << 20), ("1.5g", 3 << 29), ("1000", 1000)]
)
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


def test_parse_size_rejects_garbage() -> None:
    for bad in ("", "lots", "-1GiB", "0"):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_calibration_only_raises_the_cost_model() -> None:
    cost = CostModel(Architecture())
    raw = cost.raw_bytes(1, 250)
    cost.calibrate([(1, 250, raw // 1000)])  # an RSS delta that saw reused memory
    assert cost.scale == 1.0
    cost.calibrate([(1, 250, 2 * raw)])
    assert cost.scale == pytest.approx(2.2)


# ---- background (file) work ----------------------------------------------------------


def test_background_runs_only_when_no_live_request_waits() -> None:
    s = make(max_batch=8, wait_ms=20.0)
    files = [request("file", i, RequestKind.BACKGROUND, 5.0, 0.0) for i in range(3)]
    for r in files:
        assert s.submit(r, 0.0) == []
    s.submit(request("live", 0, RequestKind.PARTIAL, 1.0, 0.0), 0.0)
    s.submit(request("live", 1, RequestKind.FINAL, 1.0, 0.0), 0.0)
    assert s.queued == 5
    # Live work first, and never mixed with file work in a batch.
    batch = s.next_batch(0.05)
    assert batch is not None and {r.session_id for r in batch.requests} == {"live"}
    s.complete(batch)
    # Then one file utterance per batch, oldest first (max_background_batch = 1).
    order = []
    while (batch := s.next_batch(0.06)) is not None:
        assert len(batch.requests) == 1 and batch.requests[0].kind is RequestKind.BACKGROUND
        order.append(batch.requests[0].utterance_id)
        s.complete(batch)
    assert order == [0, 1, 2] and s.queued == 0


def test_background_is_due_at_once_but_live_work_arriving_goes_first() -> None:
    s = make(max_batch=8, wait_ms=20.0, max_background_batch=2)
    for i in range(4):
        s.submit(request("file", i, RequestKind.BACKGROUND, 2.0, 1.0), 1.0)
    assert s.next_wakeup() == 1.0  # nothing live: no reason to wait
    first = s.next_batch(1.0)
    assert first is not None and [r.utterance_id for r in first.requests] == [0, 1]
    s.submit(request("live", 0, RequestKind.FINAL, 1.0, 1.001), 1.001)
    # A live final now waits its batching window; file work does not jump in meanwhile.
    assert s.next_wakeup() == pytest.approx(1.021)
    assert s.next_batch(1.01) is None
    live = s.next_batch(1.03)
    assert live is not None and live.requests[0].session_id == "live"


def test_cancel_removes_a_files_queued_work() -> None:
    s = make()
    for i in range(3):
        s.submit(request("file", i, RequestKind.BACKGROUND, 2.0, 0.0), 0.0)
    s.submit(request("other", 0, RequestKind.BACKGROUND, 2.0, 0.0), 0.0)
    gone = s.cancel("file")
    assert len(gone) == 3 and s.queued == 1


def test_background_batch_is_bounded_by_config() -> None:
    with pytest.raises(ValueError):
        SchedulerConfig(max_batch=4, max_background_batch=5)
    with pytest.raises(ValueError):
        SchedulerConfig(max_background_batch=0)


def test_background_keeps_to_its_share_while_live_streams_are_active() -> None:
    s = make(max_batch=8, wait_ms=0.0, background_share=0.25, live_recent_s=2.0)
    for i in range(4):
        s.submit(request("file", i, RequestKind.BACKGROUND, 2.0, 0.0), 0.0)
    s.submit(request("live", 0, RequestKind.PARTIAL, 1.0, 10.0), 10.0)
    live = s.next_batch(10.0)
    assert live is not None and live.requests[0].session_id == "live"
    s.complete(live, 10.05)
    first = s.next_batch(10.05)  # nothing live queued: background may run
    assert first is not None and first.requests[0].kind is RequestKind.BACKGROUND
    s.complete(first, 10.15)  # it ran 100 ms: the next may start 300 ms later
    assert s.next_batch(10.2) is None
    assert s.next_wakeup() == pytest.approx(10.45)
    second = s.next_batch(10.45)
    assert second is not None and second.requests[0].utterance_id == 1
    s.complete(second, 10.55)
    assert s.next_batch(10.6) is None
    # Once live work has been quiet for live_recent_s, files run back to back.
    third = s.next_batch(12.01)
    assert third is not None and third.requests[0].utterance_id == 2
    s.complete(third, 12.5)
    fourth = s.next_batch(12.5)
    assert fourth is not None and fourth.requests[0].utterance_id == 3


def test_a_wake_up_at_the_background_due_time_finds_it_due() -> None:
    # 0.3 + 0.6 - 0.3 < 0.6 in floats: two formulas for "live has gone quiet" disagreed,
    # the engine slept until the next submit, and a file upload stalled for good.
    s = make(wait_ms=0.0, background_share=0.01, live_recent_s=0.6)
    s.submit(request("live", 0, RequestKind.PARTIAL, 1.0, 0.3), 0.3)
    live = s.next_batch(0.3)
    assert live is not None
    s.complete(live, 0.3)
    for i in range(2):
        s.submit(request("file", i, RequestKind.BACKGROUND, 1.0, 0.3), 0.3)
    first = s.next_batch(0.3)
    assert first is not None
    s.complete(first, 0.4)
    wake = s.next_wakeup()
    assert wake == 0.3 + 0.6
    assert s.next_batch(wake) is not None
