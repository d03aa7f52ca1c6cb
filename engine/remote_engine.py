"""RemoteEngine: the `EngineClient` of a gateway whose engines are replicas elsewhere.

The bookkeeping (pins, owed requests, failover) is `Fleet`'s; this is its I/O shell over
a `Transport` (Ray Serve in production, in-process replicas in tests). Per replica it
runs a sender, which sends one `Tick` carrying everything queued since its last call,
and a collector, which keeps one `collect` call waiting for results. A replica that a
call finds gone is dropped and its sessions' owed requests go to another; a discovery
task finds replicas that join (a replacement, or a scale-out), at once when one is lost
and every `discover_every_s` otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from engine.builder import EngineReport
from engine.client import EngineSnapshot
from engine.errors import ReplicaLostError
from engine.fleet import Fleet
from engine.remote_messages import Collected, Hello, Tick
from engine.remote_metrics import RemoteMetrics
from engine.types import InferenceRequest, InferenceResult, RequestKind

log = logging.getLogger("sensestream.engine")


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
    ) -> None:
        self._transport = transport
        self.metrics = metrics or RemoteMetrics()
        self._fleet = Fleet(gateway_id or uuid.uuid4().hex)
        self._collect_wait_s = collect_wait_s
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
        return snapshot

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
            for hello in hellos:
                self._attach(hello)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._discover_now.wait(), self._discover_every_s)

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
        try:
            await job(replica)
        except ReplicaLostError as exc:
            log.warning("%s; its sessions move to another replica", exc)
            self._lose(replica)

    async def _send(self, replica: str) -> None:
        link = self._links[replica]
        while True:
            await link.wake.wait()
            link.wake.clear()
            tick = self._fleet.take(replica)
            if tick:
                self.metrics.calls.labels("tick").inc()
                await self._transport.tick(replica, tick)

    async def _collect(self, replica: str) -> None:
        link = self._links[replica]
        while True:
            self.metrics.calls.labels("collect").inc()
            got = await self._transport.collect(replica, self.gateway_id, self._collect_wait_s)
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
        self.metrics.lost.inc()
        self.metrics.resent.inc(self._fleet.resent - before)
        self.metrics.replicas.set(len(self._links))
        self._discover_now.set()

    def _wake(self, replica: str | None) -> None:
        link = None if replica is None else self._links.get(replica)
        if link is not None:
            link.wake.set()

    def _note_settled(self) -> None:
        if self._fleet.owed == 0:
            self._settled.set()


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
