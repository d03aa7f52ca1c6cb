"""RemoteEngine: the `EngineClient` of a gateway whose engines are replicas elsewhere.

The bookkeeping (pins, owed requests, failover) is `Fleet`'s; this is its I/O shell over
a `Transport` (Ray Serve in production, in-process replicas in tests). Per replica it
runs a sender, which sends one `Tick` carrying everything queued since its last call,
and a collector, which keeps one `collect` call waiting for results. A replica that a
call finds gone is dropped and its sessions' owed requests go to another; a discovery
task finds replicas that join (a replacement, or a scale-out), at once when one is lost
and every `discover_every_s` otherwise.

A replica is lost when a call to it fails, when a call goes unanswered past its deadline,
or when either of its tasks ends for any reason at all: a link missing a task would leave
the replica looking attached while its sessions wait for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from engine.client import EngineSnapshot
from engine.errors import ReplicaLostError
from engine.remote.fleet import DEFAULT_HOMELESS_AUDIO_S, Fleet
from engine.remote.messages import Collected, Hello, Tick
from engine.remote.metrics import RemoteMetrics
from engine.serving.builder import EngineReport
from engine.types import InferenceRequest, InferenceResult, RequestKind

log = logging.getLogger("sensestream.engine")
T = TypeVar("T")

#: Seconds a call to a replica may go unanswered, beyond what it asks the replica to wait
#: (a collect waits up to `collect_wait_s` for results). A live replica answers a tick in
#: milliseconds, and a collect as soon as it has a result or its wait ends; an answer
#: seconds late means a replica hung or out of reach, which the gateway cannot tell from
#: a dead one. Generous, because a loss moves every session of the replica and resends
#: their owed audio; far inside the replica's lease (`replica.DEFAULT_LEASE_S`, 60 s), so
#: the gateway gives up on a replica before the replica gives up on the gateway.
CALL_DEADLINE_S = 10.0


class Transport(Protocol):
    """Calls to replicas by id; each raises `ReplicaLostError` when its replica is gone."""

    async def discover(self, known: frozenset[str]) -> list[Hello]:
        """The replicas not in `known` (waits while there are none at all)."""
        ...

    async def tick(self, replica: str, tick: Tick) -> None: ...

    async def collect(self, replica: str, gateway: str, wait_s: float) -> Collected: ...

    async def close(self) -> None: ...


@dataclass
class _Link:
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    snapshot: EngineSnapshot | None = None


class RemoteEngine:
    """Sessions' requests out to pinned replicas, their results back to the sessions."""

    def __init__(
        self,
        transport: Transport,
        metrics: RemoteMetrics | None = None,
        *,
        gateway_id: str | None = None,
        collect_wait_s: float = 2.0,
        discover_every_s: float = 10.0,
        call_deadline_s: float = CALL_DEADLINE_S,
        homeless_audio_s: float = DEFAULT_HOMELESS_AUDIO_S,
    ) -> None:
        self._transport = transport
        self.metrics = metrics or RemoteMetrics()
        self._fleet = Fleet(gateway_id or uuid.uuid4().hex, homeless_audio_s=homeless_audio_s)
        self._collect_wait_s = collect_wait_s
        self._call_deadline_s = call_deadline_s
        self._discover_every_s = discover_every_s
        self._channels: dict[str, asyncio.Queue[InferenceResult]] = {}
        self._links: dict[str, _Link] = {}
        self._discover_now = asyncio.Event()
        self._attached = asyncio.Event()  # set at every attach
        self._settled = asyncio.Event()  # set whenever nothing is owed
        self._settled.set()
        self._task: asyncio.Task[None] | None = None
        self.report: EngineReport | None = None

    @property
    def gateway_id(self) -> str:
        return self._fleet.gateway

    @property
    def replicas(self) -> tuple[str, ...]:
        return tuple(self._links)

    # ---- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            loop = asyncio.get_running_loop()
            self._task = loop.create_task(self._discovery(), name="engine-discovery")

    async def attached(self, replicas: int = 1) -> EngineReport:
        """Wait until `replicas` replicas are attached; the first one's report describes
        the engine."""
        while len(self._links) < replicas or self.report is None:
            self._attached.clear()
            await self._attached.wait()
        return self.report

    async def close(self, timeout: float | None = None) -> None:
        """Wait (within `timeout`) for every owed answer, then stop calling replicas."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._settled.wait(), timeout)
        tasks = [t for link in self._links.values() for t in link.tasks]
        if self._task is not None:
            tasks.append(self._task)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._links.clear()
        await self._transport.close()

    @property
    def healthy(self) -> bool:
        """Discovery runs and a replica is attached (so new sessions are refused whenever
        requests wait for one: they wait only while none is)."""
        alive = self._task is not None and not self._task.done()
        return alive and bool(self._links)

    def snapshot(self) -> EngineSnapshot:
        """Every live replica's latest counters, added up."""
        snapshot = combine(
            {rid: link.snapshot for rid, link in self._links.items() if link.snapshot},
            replicas=tuple(self._links),
            healthy=self.healthy,
        )
        self.metrics.queued.set(snapshot.queued)
        # Partials dropped here, while they waited for a replica, count with the replicas'.
        dropped = snapshot.partials_dropped + self._fleet.partials_dropped
        return dataclasses.replace(snapshot, partials_dropped=dropped)

    # ---- sessions -----------------------------------------------------------------

    def open_session(
        self, session_id: str, results: asyncio.Queue[InferenceResult] | None = None
    ) -> asyncio.Queue[InferenceResult]:
        self._fleet.open(session_id)
        channel: asyncio.Queue[InferenceResult] = asyncio.Queue() if results is None else results
        self._channels[session_id] = channel
        return channel

    def submit(self, request: InferenceRequest) -> None:
        replica = self._fleet.submit(request)
        if request.kind is not RequestKind.PARTIAL:
            self._settled.clear()
        self._deliver_failed()
        self._wake(replica)

    def cancel(self, session_id: str) -> int:
        self._channels.pop(session_id, None)
        dropped, replica = self._fleet.cancel(session_id)
        self._wake(replica)
        self._note_settled()
        return dropped

    # ---- links --------------------------------------------------------------------

    async def _discovery(self) -> None:
        while True:
            self._discover_now.clear()
            try:
                hellos = await self._transport.discover(frozenset(self._links))
            except ReplicaLostError as exc:  # one died while answering: ask again soon
                log.info("discovery: %s", exc)
                hellos = []
            # The discovery loop's boundary: were it to end, no replica would ever attach
            # again, so any failure is logged and the next round tries again.
            except Exception as exc:  # logged with its traceback (ruff BLE allows it)
                log.error("discovery failed (%s): %s", type(exc).__name__, exc, exc_info=exc)
                hellos = []
            for hello in hellos:
                self._attach(hello)
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the wake-up
            # of a loss that lands in the same turn as `close`'s cancel, swallowing it.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._discover_every_s):
                    await self._discover_now.wait()

    def _attach(self, hello: Hello) -> None:
        if hello.replica in self._links:
            return
        link = self._links[hello.replica] = _Link()
        loop = asyncio.get_running_loop()
        for job in (self._send, self._collect):
            link.tasks.append(loop.create_task(self._guarded(hello.replica, job)))
        for replica in self._fleet.add(hello.replica):
            self._wake(replica)
        self.metrics.replicas.set(len(self._links))
        log.info("engine replica %s attached (%d in all)", hello.replica, len(self._links))
        if self.report is None:
            self.report = hello.report
        self._attached.set()

    async def _guarded(self, replica: str, job: Callable[[str], Awaitable[None]]) -> None:
        """Run one of a link's tasks; however it ends (but cancelled), the replica is lost."""
        try:
            await job(replica)
        except ReplicaLostError as exc:
            log.warning("%s; its sessions move to another replica", exc)
        # A link task's boundary: whatever ended it, the link cannot send or collect any
        # more, so the replica is as good as lost to this gateway.
        except Exception as exc:  # logged with its traceback (ruff BLE allows it)
            why = f"{type(exc).__name__}: {exc}"
            log.error(
                "link to replica %s failed (%s); its sessions move", replica, why, exc_info=exc
            )
        self._lose(replica)

    async def _send(self, replica: str) -> None:
        link = self._links[replica]
        while True:
            await link.wake.wait()
            link.wake.clear()
            tick = self._fleet.take(replica)
            if tick:
                self.metrics.calls.labels("tick").inc()
                call = self._transport.tick(replica, tick)
                await _within(self._call_deadline_s, replica, "tick", call)

    async def _collect(self, replica: str) -> None:
        link = self._links[replica]
        while True:
            self.metrics.calls.labels("collect").inc()
            wait_s = self._collect_wait_s
            call = self._transport.collect(replica, self.gateway_id, wait_s)
            got = await _within(wait_s + self._call_deadline_s, replica, "collect", call)
            link.snapshot = got.snapshot
            for result in self._fleet.accept(replica, got.results):
                channel = self._channels.get(result.ref.session_id)
                if channel is not None:
                    channel.put_nowait(result)
            self._note_settled()

    def _lose(self, replica: str) -> None:
        link = self._links.pop(replica, None)
        if link is None:
            return
        current = asyncio.current_task()
        for task in link.tasks:
            if task is not current:
                task.cancel()
        before = self._fleet.resent
        for other in self._fleet.lose(replica):
            self._wake(other)
        self._deliver_failed()  # the last replica gone: owed requests past the bound fail
        self.metrics.lost.inc()
        self.metrics.resent.inc(self._fleet.resent - before)
        self.metrics.replicas.set(len(self._links))
        self._discover_now.set()

    def _wake(self, replica: str | None) -> None:
        link = None if replica is None else self._links.get(replica)
        if link is not None:
            link.wake.set()

    def _deliver_failed(self) -> None:
        """Hand sessions the error answers of owed requests that found no room to wait."""
        for result in self._fleet.take_failed():
            self.metrics.failed.labels(result.ref.kind.value).inc()
            channel = self._channels.get(result.ref.session_id)
            if channel is not None:
                channel.put_nowait(result)
        self._note_settled()

    def _note_settled(self) -> None:
        if self._fleet.owed == 0:
            self._settled.set()


async def _within(deadline_s: float, replica: str, call: str, answer: Awaitable[T]) -> T:
    """`answer`, or `ReplicaLostError` when it has not come within `deadline_s`."""
    # A lost replica rather than failed requests: a tick carries many sessions' requests
    # and a collect all their results, and whether the replica took the tick is unknown,
    # which is what failover is for (owed requests are sent again elsewhere, the first
    # answer is delivered once); failing the requests instead would leave their sessions
    # pinned to a replica that does not answer.
    try:
        async with asyncio.timeout(deadline_s):
            return await answer
    except TimeoutError as exc:
        why = f"no answer to a {call} call within {deadline_s:g} s"
        raise ReplicaLostError(replica, why) from exc


def combine(
    snapshots: Mapping[str, EngineSnapshot], *, replicas: tuple[str, ...], healthy: bool
) -> EngineSnapshot:
    """One snapshot for many replicas (`replicas`: those attached, whether or not they have
    reported yet): counters add up, devices are listed per replica."""
    parts = list(snapshots.values())
    batches = sum(s.batches for s in parts)
    kinds = {kind.value for kind in RequestKind}
    return EngineSnapshot(
        queued=sum(s.queued for s in parts),
        partials_dropped=sum(s.partials_dropped for s in parts),
        batches=batches,
        max_batch=max((s.max_batch for s in parts), default=0),
        mean_padding_efficiency=round(
            sum(s.mean_padding_efficiency * s.batches for s in parts) / max(batches, 1), 3
        ),
        oom_splits=sum(s.oom_splits for s in parts),
        audio_s_by_kind={
            k: round(sum(s.audio_s_by_kind.get(k, 0.0) for s in parts), 1) for k in sorted(kinds)
        },
        budget_bytes=sum(s.budget_bytes for s in parts),
        in_use_bytes=sum(s.in_use_bytes for s in parts),
        devices=tuple(
            {**device, "replica": rid} for rid, s in snapshots.items() for device in s.devices
        ),
        # One replica's failing device does not make the others unready.
        healthy=healthy and (not parts or any(s.healthy for s in parts)),
        replicas=replicas,
    )
