"""The micro-batching scheduler: a synchronous core that takes `now` and never blocks.

Policy, in order: finals before partials, and live finals before bulk ones (a replay's);
a newer partial of an utterance replaces the queued one and a final drops its utterance's
partials; stale partials are dropped; a batch leaves when it is full or when its oldest
request has waited `max_wait_ms`; it is anchored on the first final in line and filled
with live requests, then bulk ones, close in length to the anchor, so padding stays
small; and a batch is formed only if its priced cost fits the memory budget.

With several devices each has its own budget: the caller names the device a batch is for
(`next_batch(now, device)`), and the batch's memory goes back to that device's budget.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from engine.errors import EngineError
from engine.serving.budget import Allocation, CostModel, MemoryBudget
from engine.types import InferenceRequest, RequestKind

Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Batching limits; `max_batch` is the resolved number (warm-up decides `auto`)."""

    max_batch: int = 8
    max_wait_ms: float = 20.0
    partial_stale_ms: float = 3000.0
    max_queued_partials: int = 512
    # Background (file) batches stay small: a live request that arrives while one runs
    # waits for it, so its length bounds what a file upload can add to live latency.
    max_background_batch: int = 1
    # While live streams are active (live work queued within `live_recent_s`), background
    # work may take at most this share of a device's time: after a background batch of T
    # seconds the next waits T * (1 - share) / share. Without live streams files run
    # at full speed.
    background_share: float = 0.02
    live_recent_s: float = 2.0

    def __post_init__(self) -> None:
        if not 1 <= self.max_batch <= 256:
            raise ValueError("max_batch must be within 1..256")
        if not 1 <= self.max_background_batch <= self.max_batch:
            raise ValueError("max_background_batch must be within 1..max_batch")
        if not 0.0 < self.background_share <= 1.0 or self.live_recent_s < 0:
            raise ValueError("background_share must be within (0, 1] and live_recent_s >= 0")
        if self.max_wait_ms < 0 or self.partial_stale_ms <= 0:
            raise ValueError("max_wait_ms must be >= 0 and partial_stale_ms > 0")


@dataclass(frozen=True, slots=True)
class Batch:
    """Requests to run together, sorted by length, with their memory reservation."""

    requests: tuple[InferenceRequest, ...]
    allocation: Allocation
    frames: int
    padding_efficiency: float
    formed_at: float
    retry: bool = False
    device: int = 0


@dataclass
class SchedulerStats:
    """Counters for metrics; plain integers, owned by one scheduler."""

    partials_replaced: int = 0
    partials_stale: int = 0
    partials_overflow: int = 0
    partials_superseded: int = 0
    oom_splits: int = 0
    batches: int = 0
    padding_efficiency_sum: float = 0.0
    # Samples sent to the device per request kind: where the compute goes.
    samples_by_kind: dict[str, int] = field(default_factory=dict)

    @property
    def partials_dropped(self) -> int:
        return (
            self.partials_replaced
            + self.partials_stale
            + self.partials_overflow
            + self.partials_superseded
        )


@dataclass(order=True)
class _Queued:
    bulk: bool  # a replay's requests line up behind live ones
    arrival: float
    seq: int
    request: InferenceRequest = field(compare=False)
    frames: int = field(compare=False)


class Scheduler:
    """Queues requests from every session and forms batches under per-device budgets.

    `budgets` holds one budget per device, in device order. One queue serves them all, so
    any idle device takes the oldest work.
    """

    def __init__(
        self,
        config: SchedulerConfig,
        budgets: Sequence[MemoryBudget],
        cost: CostModel,
        frames_of: Callable[[int], int],
    ) -> None:
        if not budgets:
            raise ValueError("a scheduler needs at least one device budget")
        self.config = config
        self.budgets: tuple[MemoryBudget, ...] = tuple(budgets)
        self.cost = cost
        self.frames_of = frames_of
        self._finals: list[_Queued] = []  # live before bulk, each by arrival
        self._partials: dict[Key, _Queued] = {}  # insertion order is arrival order
        self._retry: deque[tuple[InferenceRequest, ...]] = deque()
        self._background: deque[_Queued] = deque()  # whole files, first come first served
        self._last_live = float("-inf")  # when live work last arrived
        self._background_after = float("-inf")  # the next background batch's earliest start
        self._rejected: list[InferenceRequest] = []
        self._seq = 0
        self.stats = SchedulerStats()

    # ---- admission --------------------------------------------------------------

    def check_fits(self, max_samples: int) -> None:
        """Refuse to start when one maximum-length utterance cannot fit every budget."""
        need = self.cost.bytes(1, self.frames_of(max_samples))
        smallest = min(b.total for b in self.budgets)
        if need > smallest:
            raise EngineError(
                f"one {max_samples / 16000:.0f} s utterance needs {need / 2**20:.0f} MiB but the "
                f"memory budget is {smallest / 2**20:.0f} MiB: raise --memory-budget "
                f"or lower the maximum segment length"
            )

    def submit(self, request: InferenceRequest, now: float) -> list[InferenceRequest]:
        """Queue a request; returns the partials it made redundant (dropped)."""
        item = self._queued(request)
        if request.kind is RequestKind.BACKGROUND:
            self._background.append(item)
            return []
        self._last_live = max(self._last_live, now)
        if request.kind.urgent:
            bisect.insort(self._finals, item)
            old = self._partials.pop(request.key, None)
            if old is None:
                return []
            self.stats.partials_superseded += 1
            return [old.request]
        dropped: list[InferenceRequest] = []
        old = self._partials.get(request.key)
        if old is not None:
            self.stats.partials_replaced += 1
            dropped.append(old.request)
        elif len(self._partials) >= self.config.max_queued_partials:
            # Overload: the oldest partial goes first; finals always queue.
            oldest = next(iter(self._partials))
            dropped.append(self._partials.pop(oldest).request)
            self.stats.partials_overflow += 1
        # Assigning to an existing key keeps its place: a newer partial takes over its
        # predecessor's place in line, so a client that speaks on is not sent to the back
        # every time (under load its partials would otherwise never come up).
        self._partials[request.key] = item
        return dropped

    def cancel(self, session_id: str) -> list[InferenceRequest]:
        """Remove everything a session has queued (it disconnected)."""
        gone = [q.request for q in self._finals if q.request.session_id == session_id]
        self._finals = [q for q in self._finals if q.request.session_id != session_id]
        for key in [k for k in self._partials if k[0] == session_id]:
            gone.append(self._partials.pop(key).request)
        kept: deque[tuple[InferenceRequest, ...]] = deque()
        for group in self._retry:
            gone += [r for r in group if r.session_id == session_id]
            rest = tuple(r for r in group if r.session_id != session_id)
            if rest:
                kept.append(rest)
        self._retry = kept
        gone += [q.request for q in self._background if q.request.session_id == session_id]
        self._background = deque(q for q in self._background if q.request.session_id != session_id)
        return gone

    def drop_stale(self, now: float) -> list[InferenceRequest]:
        """Partials older than the staleness limit are no longer worth decoding."""
        limit = now - self.config.partial_stale_ms / 1000
        stale = [k for k, q in self._partials.items() if q.arrival < limit]
        self.stats.partials_stale += len(stale)
        return [self._partials.pop(k).request for k in stale]

    # ---- batching ---------------------------------------------------------------

    @property
    def queued(self) -> int:
        live = len(self._finals) + len(self._partials)
        return live + sum(len(g) for g in self._retry) + len(self._background)

    def next_wakeup(self) -> float | None:
        """When the oldest queued request's wait runs out (None when nothing is queued)."""
        oldest = self._oldest_arrival()
        if oldest is None and self._background:
            return self._background_due_at()
        return None if oldest is None else oldest + self.config.max_wait_ms / 1000

    def next_batch(self, now: float, device: int = 0) -> Batch | None:
        """A batch to run now on `device`, or None (not full and not yet due, or no memory
        free on that device)."""
        if self._retry:
            batch = self._retry_batch(now, device)
            if batch is not None or self._retry:
                return batch  # retries first; fresh work once none is left
        oldest = self._oldest_arrival()
        if oldest is None:
            return self._form_background(now, device) if self._background_due(now) else None
        full = len(self._finals) + len(self._partials) >= self.config.max_batch
        if not full and now < oldest + self.config.max_wait_ms / 1000:
            return None
        return self._form(now, device)

    def take_rejected(self) -> list[InferenceRequest]:
        """Requests that can never fit the budget; the caller answers them with errors."""
        rejected, self._rejected = self._rejected, []
        return rejected

    def complete(self, batch: Batch, now: float | None = None) -> None:
        """The batch finished (or failed) at `now`: give its memory back to its device.

        A background batch's run time, from `formed_at` to `now`, sets when the next one
        may start while live streams are active (`background_share`).
        """
        self.budgets[batch.device].free(batch.allocation)
        background = batch.requests and batch.requests[0].kind is RequestKind.BACKGROUND
        if background and now is not None:
            share = self.config.background_share
            ran = max(0.0, now - batch.formed_at)
            self._background_after = now + ran * (1.0 - share) / share

    def _background_due(self, now: float) -> bool:
        # One formula for here and next_wakeup: a wake-up at the due time must find it due.
        return bool(self._background) and now >= self._background_due_at()

    def _background_due_at(self) -> float:
        """At once, unless live streams are active and background has used its share."""
        live_ends = self._last_live + self.config.live_recent_s
        return max(self._background[0].arrival, min(self._background_after, live_ends))

    def split_after_oom(self, batch: Batch) -> InferenceRequest | None:
        """Requeue the halves of a batch that ran out of memory.

        Returns the request when the batch was a single item: it cannot run at all and the
        caller answers it with an error. Either way the cost model gets more conservative.
        """
        self.cost.be_more_conservative()
        self.stats.oom_splits += 1
        if len(batch.requests) == 1:
            return batch.requests[0]
        half = len(batch.requests) // 2
        self._retry.appendleft(batch.requests[half:])
        self._retry.appendleft(batch.requests[:half])
        return None

    def _retry_batch(self, now: float, device: int) -> Batch | None:
        """The first retry group, if `device` has the memory for it now.

        A group that no budget could hold any more (the cost model grew with each
        out-of-memory error) is split again, and a single request that cannot fit even
        alone is rejected, as a fresh one would be: otherwise it would head the line
        forever and nothing behind it would ever run.
        """
        largest = max(b.total for b in self.budgets)
        while self._retry:
            group = self._retry[0]
            size = self.cost.bytes(len(group), max(self.frames_of(r.num_samples) for r in group))
            if size <= largest:
                allocation = self.budgets[device].allocate(size)
                if allocation is None:
                    return None  # wait for memory here, or for a device with more
                self._retry.popleft()
                return self._batch(list(group), allocation, now, retry=True, device=device)
            self._retry.popleft()
            if len(group) == 1:
                self._rejected.append(group[0])
            else:
                half = len(group) // 2
                self._retry.appendleft(group[half:])
                self._retry.appendleft(group[:half])
        return None

    def _form(self, now: float, device: int) -> Batch | None:
        budget = self.budgets[device]
        anchor = self._finals[0] if self._finals else next(iter(self._partials.values()))
        chosen = [anchor]
        frames = anchor.frames
        allocation_size = self.cost.bytes(1, frames)
        if allocation_size > max(b.total for b in self.budgets):
            # It can never fit, even alone (the cost model grew after out-of-memory errors).
            self._remove(chosen)
            self._rejected.append(anchor.request)
            return None
        if allocation_size > budget.available:
            return None  # wait for memory here, or for a device with a larger budget
        for group in (self._finals, list(self._partials.values())):
            ranked = sorted(
                (q for q in group if q is not anchor),
                key=lambda q: (q.bulk, abs(q.frames - anchor.frames)),
            )
            for q in ranked:
                if len(chosen) >= self.config.max_batch:
                    break
                size = self.cost.bytes(len(chosen) + 1, max(frames, q.frames))
                if size <= budget.available:
                    chosen.append(q)
                    frames = max(frames, q.frames)
                    allocation_size = size
        allocation = budget.allocate(allocation_size)
        if allocation is None:
            return None
        self._remove(chosen)
        return self._batch([q.request for q in chosen], allocation, now, device=device)

    def _form_background(self, now: float, device: int) -> Batch | None:
        """File utterances in arrival order, when no live request waits."""
        budget = self.budgets[device]
        chosen: list[_Queued] = []
        size = 0
        for q in list(self._background)[: self.config.max_background_batch]:
            frames = max([q.frames, *(c.frames for c in chosen)])
            need = self.cost.bytes(len(chosen) + 1, frames)
            if need > max(b.total for b in self.budgets) and not chosen:
                self._background.popleft()  # it can never fit, even alone
                self._rejected.append(q.request)
                return None
            if need > budget.available:
                break
            chosen.append(q)
            size = need
        if not chosen:
            return None
        allocation = budget.allocate(size)
        if allocation is None:
            return None
        for _ in chosen:
            self._background.popleft()
        return self._batch([q.request for q in chosen], allocation, now, device=device)

    def _batch(
        self,
        requests: list[InferenceRequest],
        allocation: Allocation,
        now: float,
        retry: bool = False,
        device: int = 0,
    ) -> Batch:
        requests.sort(key=lambda r: r.num_samples)
        lengths = [self.frames_of(r.num_samples) for r in requests]
        frames = max(lengths)
        efficiency = sum(lengths) / (frames * len(lengths)) if frames else 1.0
        self.stats.batches += 1
        self.stats.padding_efficiency_sum += efficiency
        for r in requests:
            kind = r.kind.value
            self.stats.samples_by_kind[kind] = (
                self.stats.samples_by_kind.get(kind, 0) + r.num_samples
            )
        return Batch(tuple(requests), allocation, frames, efficiency, now, retry, device)

    def _remove(self, chosen: list[_Queued]) -> None:
        ids = {id(q) for q in chosen}
        self._finals = [q for q in self._finals if id(q) not in ids]
        for q in chosen:
            if q.request.kind is RequestKind.PARTIAL:
                self._partials.pop(q.request.key, None)

    def _queued(self, request: InferenceRequest) -> _Queued:
        self._seq += 1
        frames = self.frames_of(request.num_samples)
        return _Queued(request.bulk, request.arrival, self._seq, request, frames)

    def _oldest_arrival(self) -> float | None:
        candidates = []
        if self._finals:
            # Live finals line up before bulk ones, each line by arrival: the oldest of
            # either is its line's first (a bulk request's wait runs out like any other).
            candidates.append(self._finals[0].arrival)
            first_bulk = bisect.bisect_left(self._finals, True, key=lambda q: q.bulk)
            if first_bulk < len(self._finals):
                candidates.append(self._finals[first_bulk].arrival)
        if self._partials:
            # Not just the first in line: a replaced partial keeps an older place.
            candidates.append(min(q.arrival for q in self._partials.values()))
        if self._retry:
            candidates.append(min(r.arrival for r in self._retry[0]))
        return min(candidates) if candidates else None
