"""Small real stand-ins for the remote engine's tests: replicas in this event loop.

`LoopbackTransport` is a `Transport` over `EngineReplica`s living in the same loop;
every message it carries is pickled and unpickled, as it would be between processes.
`FakeEngine` is an `EngineClient` whose answers name their request, and can be held
back until a test releases them, so that requests can be in flight when a replica dies.
"""

from __future__ import annotations

import asyncio
import pickle
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from engine.client import EngineSnapshot, open_channel
from engine.errors import ReplicaLostError
from engine.remote.messages import Collected, Hello, Tick
from engine.remote.replica import DEFAULT_LEASE_S, EngineReplica
from engine.serving.builder import EngineReport
from engine.types import SAMPLE_RATE, InferenceRequest, InferenceResult, RequestKind, Transcript

T = TypeVar("T")

REPORT = EngineReport(
    model="tiny",
    test_model=True,
    backend="torch",
    load_s=0.0,
    warmup_s=0.0,
    max_batch=8,
    batch_curve=(),
    memory_budget=2 << 30,
    cost_scale=1.0,
)


class Watch:
    """Wait, with a deadline, until something about a fake's state holds."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()

    def poke(self) -> None:
        self._changed.set()

    async def until(self, holds: Callable[[], bool], timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while not holds():
                self._changed.clear()
                await self._changed.wait()


def answer_text(request: InferenceRequest) -> str:
    """What FakeEngine answers `request` with (its session as the engine names it)."""
    return f"{request.session_id}:{request.request_id}"


class FakeEngine:
    """An EngineClient answering every request with `session:request_id`, after `hold`."""

    def __init__(self, name: str = "fake", hold: asyncio.Event | None = None) -> None:
        self.name = name
        self.hold = hold
        self.received: list[InferenceRequest] = []
        self.answered: list[InferenceResult] = []
        self.cancelled: list[str] = []
        self.started = False
        self.closed = False
        self.watch = Watch()
        self._channels: dict[str, asyncio.Queue[InferenceResult]] = {}
        self._pending: dict[asyncio.Task[None], str] = {}

    def start(self) -> None:
        self.started = True

    async def close(self, timeout: float | None = None) -> None:
        """Answer what is pending (within `timeout`), then drop the rest."""
        if self._pending and (timeout is None or timeout > 0):
            await asyncio.wait(list(self._pending), timeout=timeout)
        for task in list(self._pending):
            task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)
        self.closed = True
        self.watch.poke()

    @property
    def healthy(self) -> bool:
        return not self.closed

    @property
    def pending(self) -> int:
        return len(self._pending)

    def open_session(
        self, session_id: str, results: asyncio.Queue[InferenceResult] | None = None
    ) -> asyncio.Queue[InferenceResult]:
        return open_channel(self._channels, session_id, results)

    def submit(self, request: InferenceRequest) -> None:
        if self.closed:
            raise RuntimeError("engine closed")
        if request.session_id not in self._channels:
            raise ValueError(f"session {request.session_id!r} is not open")
        self.received.append(request)
        task = asyncio.get_running_loop().create_task(self._answer(request))
        self._pending[task] = request.session_id
        task.add_done_callback(self._done)
        self.watch.poke()

    def cancel(self, session_id: str) -> int:
        self.cancelled.append(session_id)
        self._channels.pop(session_id, None)
        gone = [task for task, sid in self._pending.items() if sid == session_id]
        for task in gone:
            task.cancel()
        self.watch.poke()
        return len(gone)

    def snapshot(self) -> EngineSnapshot:
        seconds = {kind.value: 0.0 for kind in RequestKind}
        for result in self.answered:
            seconds[result.ref.kind.value] += result.ref.num_samples / SAMPLE_RATE
        return EngineSnapshot(
            queued=len(self._pending),
            partials_dropped=0,
            batches=len(self.answered),
            max_batch=1,
            mean_padding_efficiency=1.0,
            oom_splits=0,
            audio_s_by_kind={k: round(v, 1) for k, v in seconds.items()},
            budget_bytes=1 << 20,
            in_use_bytes=0,
            devices=({"device": self.name, "batches": len(self.answered)},),
            healthy=self.healthy,
        )

    async def _answer(self, request: InferenceRequest) -> None:
        if self.hold is not None:
            await self.hold.wait()
        text = answer_text(request)
        result = InferenceResult(
            request.ref, Transcript(text, "en", "NEUTRAL", "Speech", True, text)
        )
        self.answered.append(result)
        channel = self._channels.get(request.session_id)
        if channel is not None:
            channel.put_nowait(result)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._pending.pop(task, None)
        self.watch.poke()


def fake_replica(
    replica_id: str, hold: asyncio.Event | None = None, *, lease_s: float = DEFAULT_LEASE_S
) -> EngineReplica:
    """An EngineReplica around a started FakeEngine named after it."""
    engine = FakeEngine(replica_id, hold)
    engine.start()
    return EngineReplica(engine, replica_id, REPORT, lease_s=lease_s)


class LoopbackTransport:
    """A Transport to replicas in this event loop; what it carries is pickled both ways.

    `kill` makes a replica gone: every call to it, later or already waiting, raises
    `ReplicaLostError`, and its engine is closed. `add` brings in another one. `fail`
    makes the next call of a kind raise an error of the test's choosing; `stall` makes a
    replica hang: its calls of a kind never answer, and discovery no longer finds it.
    """

    def __init__(self, replicas: Iterable[EngineReplica] = ()) -> None:
        self._replicas: dict[str, EngineReplica] = {}
        self._deaths: dict[str, asyncio.Event] = {}
        self._joined = asyncio.Event()
        self.killed: list[str] = []
        self.closed = False
        self.bytes_sent = 0
        self.bytes_received = 0
        self.calls: Counter[str] = Counter()
        self.calls_to: Counter[tuple[str, str]] = Counter()  # (call, replica)
        self.watch = Watch()
        self._faults: dict[tuple[str, str], Exception] = {}  # (call, replica): raised once
        self._stalled: set[tuple[str, str]] = set()  # (call, replica)
        for replica in replicas:
            self.add(replica)

    @property
    def live(self) -> tuple[str, ...]:
        return tuple(self._replicas)

    def replica(self, replica_id: str) -> EngineReplica:
        return self._replicas[replica_id]

    def add(self, replica: EngineReplica) -> None:
        if replica.replica_id in self._replicas or replica.replica_id in self.killed:
            raise ValueError(f"replica {replica.replica_id!r} was added before")
        self._replicas[replica.replica_id] = replica
        self._deaths[replica.replica_id] = asyncio.Event()
        self._joined.set()
        self.watch.poke()

    def fail(self, call: str, replica: str, error: Exception) -> None:
        """The next `call` ("discover", "tick", "collect") to `replica` ("" for discover)
        raises `error`."""
        self._faults[(call, replica)] = error

    def stall(self, call: str, replica: str) -> None:
        """Every later `call` ("tick" or "collect") to `replica` waits until it is killed."""
        self._stalled.add((call, replica))

    async def kill(self, replica_id: str) -> None:
        replica = self._replicas.pop(replica_id)
        self.killed.append(replica_id)
        self._deaths[replica_id].set()
        self.watch.poke()
        await replica.engine.close(timeout=0)

    # ---- Transport ----------------------------------------------------------------

    async def discover(self, known: frozenset[str]) -> list[Hello]:
        self._count("discover", "")
        while not self._replicas:
            self._joined.clear()
            await self._joined.wait()
        hung = {replica for _, replica in self._stalled}
        return [
            self._receive(replica.hello())
            for rid, replica in self._replicas.items()
            if rid not in known and rid not in hung
        ]

    async def tick(self, replica: str, tick: Tick) -> None:
        self._count("tick", replica)
        await self._stall_if_asked("tick", replica)
        target = self._live(replica)
        data = pickle.dumps(tick)
        self.bytes_sent += len(data)
        target.tick(pickle.loads(data), asyncio.get_running_loop().time())

    async def collect(self, replica: str, gateway: str, wait_s: float) -> Collected:
        self._count("collect", replica)
        await self._stall_if_asked("collect", replica)
        target = self._live(replica)
        got = await self._unless_killed(replica, target.collect(gateway, wait_s))
        return self._receive(got)

    async def close(self) -> None:
        self.closed = True
        replicas, self._replicas = list(self._replicas.values()), {}
        for replica in replicas:
            await replica.engine.close(timeout=0)
        self.watch.poke()

    # ---- helpers ------------------------------------------------------------------

    def _count(self, call: str, replica: str) -> None:
        """Count a call, and raise the error `fail` set for it, if any."""
        self.calls[call] += 1
        self.calls_to[(call, replica)] += 1
        self.watch.poke()
        fault = self._faults.pop((call, replica), None)
        if fault is not None:
            raise fault

    async def _stall_if_asked(self, call: str, replica: str) -> None:
        """Wait for ever (until the replica is killed) if `stall` asked it of this call."""
        if (call, replica) in self._stalled and replica in self._deaths:
            await self._deaths[replica].wait()

    def _live(self, replica: str) -> EngineReplica:
        target = self._replicas.get(replica)
        if target is None:
            why = "killed" if replica in self.killed else "not known here"
            raise ReplicaLostError(replica, why)
        return target

    def _receive(self, message: T) -> T:
        data = pickle.dumps(message)
        self.bytes_received += len(data)
        loaded: T = pickle.loads(data)
        return loaded

    async def _unless_killed(self, replica: str, call: Awaitable[T]) -> T:
        """`call`'s answer, or ReplicaLostError if the replica is killed first."""
        answer = asyncio.ensure_future(call)
        death = asyncio.ensure_future(self._deaths[replica].wait())
        try:
            await asyncio.wait({answer, death}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            death.cancel()
            if not answer.done():
                answer.cancel()
        if not answer.done() or answer.cancelled():
            raise ReplicaLostError(replica, "killed while a call waited")
        return answer.result()
