"""AsyncEngine: the asyncio bridge. One executor thread per device runs that device's batches.

The scheduler is touched only from the event loop; each executor thread touches only its
own recognizer. Whenever a device is free the loop asks the scheduler for a batch for it,
least-loaded device first, and awaits the result without blocking. Results go to a
per-session asyncio queue, so sessions never see each other's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from engine.client import EngineSnapshot, open_channel
from engine.decoding.recognizer import Recognizer, Utterance
from engine.errors import (
    BackendOutOfMemoryError,
    BackendUnavailableError,
    EngineError,
    RequestError,
)
from engine.serving.builder import EngineParts
from engine.serving.device_metrics import DeviceMetrics
from engine.serving.dispatch import DeviceLoad, by_least_loaded
from engine.serving.metrics import EngineMetrics
from engine.serving.scheduler import Batch, Scheduler
from engine.types import SAMPLE_RATE, InferenceRequest, InferenceResult, RequestKind, Transcript


@dataclass(frozen=True, slots=True)
class _OutOfMemory:
    message: str


@dataclass(frozen=True, slots=True)
class _Done:
    results: list[InferenceResult]
    failed: bool  # the backend raised: the device counts as unhealthy until a good batch


@dataclass
class _Worker:
    """One device: its recognizer, its executor thread and its load (owned by the loop)."""

    index: int
    name: str
    recognizer: Recognizer
    executor: ThreadPoolExecutor
    in_flight: int = 0
    in_flight_frames: int = 0
    frames_done: int = 0
    batches: int = 0
    failed_in_a_row: int = 0

    def load(self) -> DeviceLoad:
        return DeviceLoad(self.index, self.in_flight, self.in_flight_frames, self.frames_done)


class AsyncEngine:
    """Owns the scheduler's dispatch loop and one executor thread per device.

    `recognizers` holds one recognizer per device, in the order of the scheduler's
    budgets. `feature_threads` > 1 computes a batch's features on a shared thread pool
    (kaldi-native-fbank releases the GIL), which a GPU needs to be kept fed.
    """

    @classmethod
    def from_parts(cls, parts: EngineParts, metrics: EngineMetrics | None = None) -> AsyncEngine:
        """The engine over what `build_engine_parts` built: the one place one is assembled
        (a server's own engine, a remote replica's)."""
        return cls(
            parts.recognizers,
            parts.scheduler,
            parts.device_names,
            metrics,
            feature_threads=parts.report.feature_threads,
        )

    def __init__(
        self,
        recognizers: Sequence[Recognizer],
        scheduler: Scheduler,
        device_names: Sequence[str],
        metrics: EngineMetrics | None = None,
        *,
        feature_threads: int = 1,
        max_in_flight: int = 1,
    ) -> None:
        recs, names = list(recognizers), list(device_names)
        if not (len(recs) == len(scheduler.budgets) == len(names)):
            raise ValueError("need one recognizer, one budget and one name per device")
        if feature_threads < 1:
            raise ValueError("feature_threads must be at least 1")
        self.scheduler = scheduler
        self.metrics = metrics or EngineMetrics()
        self.device_metrics = DeviceMetrics(self.metrics.registry)
        self._workers = [
            _Worker(i, name, rec, ThreadPoolExecutor(1, thread_name_prefix=f"engine-{name}"))
            for i, (name, rec) in enumerate(zip(names, recs, strict=True))
        ]
        self._features = (
            ThreadPoolExecutor(feature_threads * len(recs), thread_name_prefix="features")
            if feature_threads > 1
            else None
        )
        for worker in self._workers:
            self.device_metrics.add(worker.name)
        self._max_in_flight = max_in_flight
        self._channels: dict[str, asyncio.Queue[InferenceResult]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._closing = False
        self._publish_memory()

    @property
    def recognizers(self) -> tuple[Recognizer, ...]:
        """One per device, in device order."""
        return tuple(w.recognizer for w in self._workers)

    # ---- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._dispatch(), name="engine")

    async def close(self, timeout: float | None = None) -> None:
        """Finish what is queued (within `timeout`), then stop the threads."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
            if not self._task.done():
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        # Batches already on a device finish; their threads cannot be interrupted anyway.
        await asyncio.gather(*self._running, return_exceptions=True)
        for worker in self._workers:
            worker.executor.shutdown(wait=True)
        if self._features is not None:
            self._features.shutdown(wait=True)

    @property
    def failed_batches_in_a_row(self) -> int:
        return max(w.failed_in_a_row for w in self._workers)

    @property
    def healthy(self) -> bool:
        """False while any device's latest batch failed in the backend; a good batch there
        restores it."""
        alive = self._task is None or not self._task.done()
        return alive and self.failed_batches_in_a_row == 0

    def device_loads(self) -> list[DeviceLoad]:
        return [w.load() for w in self._workers]

    def device_stats(self) -> list[dict[str, Any]]:
        """Per-device numbers for /stats."""
        return [
            {
                "device": w.name,
                "backend": w.recognizer.backend.name,
                "in_flight": w.in_flight,
                "batches": w.batches,
                "frames_done": w.frames_done,
                "failed_in_a_row": w.failed_in_a_row,
                "memory_budget_bytes": self.scheduler.budgets[w.index].total,
                "memory_in_use_bytes": self.scheduler.budgets[w.index].in_use,
            }
            for w in self._workers
        ]

    def snapshot(self) -> EngineSnapshot:
        """The counters /stats reports; the queue gauge is brought up to date on the way."""
        sched = self.scheduler
        st = sched.stats
        self.metrics.queued.set(sched.queued)
        return EngineSnapshot(
            queued=sched.queued,
            partials_dropped=st.partials_dropped,
            batches=st.batches,
            max_batch=sched.config.max_batch,
            mean_padding_efficiency=round(st.padding_efficiency_sum / max(st.batches, 1), 3),
            oom_splits=st.oom_splits,
            # Every kind, zero included, so a dashboard's series exist from the start.
            audio_s_by_kind={
                kind.value: round(st.samples_by_kind.get(kind.value, 0) / SAMPLE_RATE, 1)
                for kind in sorted(RequestKind, key=lambda k: k.value)
            },
            budget_bytes=sum(b.total for b in sched.budgets),
            in_use_bytes=sum(b.in_use for b in sched.budgets),
            devices=tuple(self.device_stats()),
            healthy=self.healthy,
        )

    # ---- sessions -----------------------------------------------------------------

    def open_session(
        self, session_id: str, results: asyncio.Queue[InferenceResult] | None = None
    ) -> asyncio.Queue[InferenceResult]:
        """The queue this session's results arrive on: `results` when given, so that the
        channels of one stream (each its own session here) can share one."""
        return open_channel(self._channels, session_id, results)

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
            launched = self._launch_ready(now, loop)
            rejected = self.scheduler.take_rejected()
            for request in rejected:
                self._deliver_error(request, "out_of_memory", "the utterance does not fit")
            if launched or rejected:
                continue
            idle = all(w.in_flight == 0 for w in self._workers)
            if self._closing and self.scheduler.queued == 0 and idle:
                return
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancel
            # that lands in the same turn as a wake-up (and it spends a task per wait).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._wait_timeout(now)):
                    await self._wake.wait()

    def _wait_timeout(self, now: float) -> float | None:
        """Until the oldest request is due; None (a submit or a finished batch wakes us)
        when every device is busy or the due work waits for memory."""
        if not by_least_loaded(self.device_loads(), self._max_in_flight):
            return None
        wake = self.scheduler.next_wakeup()
        if wake is None or wake <= now:
            return None
        return wake - now

    def _launch_ready(self, now: float, loop: asyncio.AbstractEventLoop) -> int:
        """Start batches on free devices, least loaded first, until none forms."""
        launched = 0
        while True:
            for index in by_least_loaded(self.device_loads(), self._max_in_flight):
                batch = self.scheduler.next_batch(now, index)
                if batch is not None:
                    self._launch(self._workers[index], batch, loop)
                    launched += 1
                    break
            else:
                return launched

    def _launch(self, worker: _Worker, batch: Batch, loop: asyncio.AbstractEventLoop) -> None:
        worker.in_flight += 1
        worker.in_flight_frames += batch.frames * len(batch.requests)
        self.device_metrics.in_flight.labels(worker.name).set(worker.in_flight)
        task = loop.create_task(self._execute(worker, batch, loop))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _execute(
        self, worker: _Worker, batch: Batch, loop: asyncio.AbstractEventLoop
    ) -> None:
        started = loop.time()
        for request in batch.requests:
            self.metrics.queue_delay.observe(max(0.0, started - request.arrival))
            seconds = request.num_samples / SAMPLE_RATE
            self.metrics.decoded_audio.labels(request.kind.value).inc(seconds)
        self.metrics.batch_size.observe(len(batch.requests))
        self.metrics.padding.observe(batch.padding_efficiency)
        self._publish_memory()
        run = partial(self._run_batch, worker.recognizer, batch)
        try:
            outcome = await loop.run_in_executor(worker.executor, run)
        except Exception as exc:  # noqa: BLE001 - whatever broke, this batch alone fails
            outcome = _failed(batch.requests, exc, [])
        finally:
            self._finish(worker, batch, loop.time() - started)
        self.metrics.inference.observe(loop.time() - started)
        if isinstance(outcome, _OutOfMemory):
            lone = self.scheduler.split_after_oom(batch)
            self.metrics.out_of_memory.labels("split" if lone is None else "failed").inc()
            if lone is not None:
                self._deliver_error(lone, "out_of_memory", outcome.message)
            return
        worker.failed_in_a_row = worker.failed_in_a_row + 1 if outcome.failed else 0
        for result in outcome.results:
            self._deliver(result)
        self.metrics.queued.set(self.scheduler.queued)

    def _finish(self, worker: _Worker, batch: Batch, seconds: float) -> None:
        """Give the batch's memory back and record the device's load, then wake the loop."""
        self.scheduler.complete(batch, asyncio.get_running_loop().time())
        frames = batch.frames * len(batch.requests)
        worker.in_flight -= 1
        worker.in_flight_frames -= frames
        worker.frames_done += frames
        worker.batches += 1
        self.device_metrics.in_flight.labels(worker.name).set(worker.in_flight)
        self.device_metrics.batches.labels(worker.name).inc()
        self.device_metrics.busy.labels(worker.name).inc(max(0.0, seconds))
        self._publish_memory()
        self._wake.set()

    def _run_batch(self, recognizer: Recognizer, batch: Batch) -> _Done | _OutOfMemory:
        """Runs on a device's thread: frontend, backend and decoding for one batch."""
        results: list[InferenceResult] = []
        ready: list[tuple[InferenceRequest, Utterance]] = []
        for request, prepared in zip(batch.requests, self._prepare(recognizer, batch), strict=True):
            if isinstance(prepared, RequestError):
                results.append(InferenceResult(request.ref, None, prepared.code, str(prepared)))
            else:
                ready.append((request, prepared))
        if not ready:
            return _Done(results, failed=False)
        try:
            transcripts = recognizer.decode([u for _, u in ready])
        except BackendOutOfMemoryError as exc:
            return _OutOfMemory(str(exc))
        except Exception as exc:  # noqa: BLE001 - a backend fault fails this batch only
            return _failed([r for r, _ in ready], exc, results)
        try:
            voices: dict[int, np.ndarray] | EngineError = _speakers(
                recognizer, [r for r, _ in ready]
            )
        except EngineError as exc:  # no speaker encoder: the requests that asked for one fail
            voices = exc
        except Exception as exc:  # noqa: BLE001 - the encoder broke: only its requests fail
            voices = BackendUnavailableError(
                f"the speaker encoder failed: {type(exc).__name__}: {exc}"
            )
        answers = [_answer(r, t, voices) for (r, _), t in zip(ready, transcripts, strict=True)]
        return _Done(results + answers, failed=False)

    def _prepare(self, recognizer: Recognizer, batch: Batch) -> list[Utterance | RequestError]:
        one = partial(_prepare_one, recognizer)
        if self._features is None or len(batch.requests) == 1:
            return [one(r) for r in batch.requests]
        return list(self._features.map(one, batch.requests))

    def _publish_memory(self) -> None:
        budgets = self.scheduler.budgets
        self.metrics.budget.set(sum(b.total for b in budgets))
        self.metrics.in_use.set(sum(b.in_use for b in budgets))
        for worker in self._workers:
            budget = budgets[worker.index]
            self.device_metrics.budget.labels(worker.name).set(budget.total)
            self.device_metrics.in_use.labels(worker.name).set(budget.in_use)

    def _deliver(self, result: InferenceResult) -> None:
        outcome = "ok" if result.ok else "error"
        self.metrics.requests.labels(result.ref.kind.value, outcome).inc()
        channel = self._channels.get(result.ref.session_id)
        if channel is not None:  # a cancelled session's results are dropped
            channel.put_nowait(result)

    def _deliver_error(self, request: InferenceRequest, code: str, message: str) -> None:
        self._deliver(InferenceResult(request.ref, None, code, message))

    def _count_dropped(self, dropped: Sequence[InferenceRequest]) -> None:
        for request in dropped:
            self.metrics.partials_dropped.inc()
            self.metrics.requests.labels(request.kind.value, "dropped").inc()


def _speakers(
    recognizer: Recognizer, requests: Sequence[InferenceRequest]
) -> dict[int, np.ndarray]:
    """The speaker embeddings of the requests that ask for one, by request id, in one batch."""
    asking = [r for r in requests if r.options.speaker]
    if not asking:
        return {}
    vectors = recognizer.speaker_vectors([r.audio for r in asking])
    return {r.request_id: v for r, v in zip(asking, vectors, strict=True)}


def _answer(
    request: InferenceRequest, transcript: Transcript, voices: dict[int, np.ndarray] | EngineError
) -> InferenceResult:
    if not isinstance(voices, EngineError):
        return InferenceResult(request.ref, transcript, speaker=voices.get(request.request_id))
    if not request.options.speaker:
        return InferenceResult(request.ref, transcript)
    return InferenceResult(request.ref, None, voices.code, str(voices))


def _prepare_one(recognizer: Recognizer, request: InferenceRequest) -> Utterance | RequestError:
    try:
        return recognizer.prepare(request.audio, request.options)
    except RequestError as exc:  # bad audio, hotwords the model cannot write: this one fails
        return exc


def _failed(
    requests: Sequence[InferenceRequest], exc: Exception, earlier: list[InferenceResult]
) -> _Done:
    code = exc.code if isinstance(exc, EngineError) else "backend_error"
    message = f"{type(exc).__name__}: {exc}"
    return _Done(earlier + [InferenceResult(r.ref, None, code, message) for r in requests], True)
