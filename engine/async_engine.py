"""AsyncEngine: the asyncio bridge. One executor thread runs every batch on the device.

The scheduler is touched only from the event loop; the executor thread touches only the
recognizer. Results go to a per-session asyncio queue, so sessions never see each other's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from engine.errors import AudioError, BackendOutOfMemoryError, EngineError
from engine.metrics import EngineMetrics
from engine.recognizer import Recognizer, Utterance
from engine.scheduler import Batch, Scheduler
from engine.types import InferenceRequest, InferenceResult


@dataclass(frozen=True, slots=True)
class _OutOfMemory:
    message: str


class AsyncEngine:
    """Owns the scheduler's dispatch loop and the device's executor thread."""

    def __init__(
        self,
        recognizer: Recognizer,
        scheduler: Scheduler,
        metrics: EngineMetrics | None = None,
        device_name: str = "cpu",
    ) -> None:
        self.recognizer = recognizer
        self.scheduler = scheduler
        self.metrics = metrics or EngineMetrics()
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"engine-{device_name}"
        )
        self._channels: dict[str, asyncio.Queue[InferenceResult]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.failed_batches_in_a_row = 0
        self.metrics.budget.set(scheduler.budget.total)

    # ---- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._dispatch(), name="engine")

    async def close(self, timeout: float | None = None) -> None:
        """Finish what is queued (within `timeout`), then stop the thread."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
            if not self._task.done():
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        self._executor.shutdown(wait=True)

    @property
    def healthy(self) -> bool:
        """False while the latest batch failed in the backend; a good batch restores it."""
        return self.failed_batches_in_a_row == 0 and (self._task is None or not self._task.done())

    # ---- sessions -----------------------------------------------------------------

    def open_session(self, session_id: str) -> asyncio.Queue[InferenceResult]:
        """The channel this session's results arrive on."""
        if session_id in self._channels:
            raise ValueError(f"session {session_id!r} is already open")
        channel: asyncio.Queue[InferenceResult] = asyncio.Queue()
        self._channels[session_id] = channel
        return channel

    def submit(self, request: InferenceRequest) -> None:
        """Queue a request (its `arrival` is on the event loop's clock)."""
        if request.session_id not in self._channels:
            raise ValueError(f"session {request.session_id!r} is not open")
        dropped = self.scheduler.submit(request, asyncio.get_running_loop().time())
        self._count_dropped(dropped)
        self.metrics.queued.set(self.scheduler.queued)
        self._wake.set()

    def cancel(self, session_id: str) -> int:
        """Forget a session: drop its queued requests and any results still to come."""
        gone = self.scheduler.cancel(session_id)
        for request in gone:
            self.metrics.requests.labels(request.kind.value, "cancelled").inc()
        self._channels.pop(session_id, None)
        self.metrics.queued.set(self.scheduler.queued)
        return len(gone)

    # ---- dispatch -----------------------------------------------------------------

    async def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            now = loop.time()
            self._count_dropped(self.scheduler.drop_stale(now))
            batch = self.scheduler.next_batch(now)
            for request in self.scheduler.take_rejected():
                self._deliver_error(request, "out_of_memory", "the utterance does not fit")
            if batch is not None:
                await self._execute(batch, loop)
                continue
            if self._closing and self.scheduler.queued == 0:
                return
            wake = self.scheduler.next_wakeup()
            timeout = None if wake is None else max(0.0, wake - now)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def _execute(self, batch: Batch, loop: asyncio.AbstractEventLoop) -> None:
        started = loop.time()
        for request in batch.requests:
            self.metrics.queue_delay.observe(max(0.0, started - request.arrival))
        self.metrics.batch_size.observe(len(batch.requests))
        self.metrics.padding.observe(batch.padding_efficiency)
        self.metrics.in_use.set(self.scheduler.budget.in_use)
        try:
            outcome = await loop.run_in_executor(self._executor, self._run_batch, batch)
        finally:
            self.scheduler.complete(batch)
            self.metrics.in_use.set(self.scheduler.budget.in_use)
        self.metrics.inference.observe(loop.time() - started)
        if isinstance(outcome, _OutOfMemory):
            lone = self.scheduler.split_after_oom(batch)
            if lone is not None:
                self._deliver_error(lone, "out_of_memory", outcome.message)
            return
        for result in outcome:
            self._deliver(result)
        self.metrics.queued.set(self.scheduler.queued)

    def _run_batch(self, batch: Batch) -> list[InferenceResult] | _OutOfMemory:
        """Runs on the executor thread: frontend, backend and decoding for one batch."""
        results: list[InferenceResult] = []
        ready: list[tuple[InferenceRequest, Utterance]] = []
        for request in batch.requests:
            try:
                ready.append((request, self.recognizer.prepare(request.audio, request.options)))
            except AudioError as exc:
                results.append(InferenceResult(request, None, exc.code, str(exc)))
        if not ready:
            return results
        try:
            transcripts = self.recognizer.decode([u for _, u in ready])
        except BackendOutOfMemoryError as exc:
            return _OutOfMemory(str(exc))
        except Exception as exc:  # noqa: BLE001 - a backend fault fails this batch only
            self.failed_batches_in_a_row += 1
            code = exc.code if isinstance(exc, EngineError) else "backend_error"
            message = f"{type(exc).__name__}: {exc}"
            return results + [InferenceResult(r, None, code, message) for r, _ in ready]
        self.failed_batches_in_a_row = 0
        return results + [
            InferenceResult(r, t) for (r, _), t in zip(ready, transcripts, strict=True)
        ]

    def _deliver(self, result: InferenceResult) -> None:
        outcome = "ok" if result.ok else "error"
        self.metrics.requests.labels(result.request.kind.value, outcome).inc()
        channel = self._channels.get(result.request.session_id)
        if channel is not None:  # a cancelled session's results are dropped
            channel.put_nowait(result)

    def _deliver_error(self, request: InferenceRequest, code: str, message: str) -> None:
        self._deliver(InferenceResult(request, None, code, message))

    def _count_dropped(self, dropped: Sequence[InferenceRequest]) -> None:
        for request in dropped:
            self.metrics.partials_dropped.inc()
            self.metrics.requests.labels(request.kind.value, "dropped").inc()
