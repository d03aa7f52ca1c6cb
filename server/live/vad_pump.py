"""Every live session's VAD on one thread of its own, off the event loop.

Sessions with `defer_vad` only buffer their audio; a connection that received some calls
`notify`. The pump then takes each waiting session's job (its whole blocks since the last
one), runs them all in one call on its thread, and hands each verdict back to its
connection on the loop. The loop's share of the VAD is then the hand-over, not the fbank,
the FSMN and funasr's endpointer (66% of the loop at 64 streams on the H200 host).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from streaming.vad.jobs import VadJob, VadStep
from streaming.vad.types import BatchingVadModel

Outcome = tuple[VadStep, ...] | Exception


class VadClient(Protocol):
    """A connection whose session's VAD the pump runs."""

    def take_vad_job(self) -> VadJob | None: ...

    def vad_done(self, job: VadJob, outcome: Outcome) -> None: ...


def run_jobs(jobs: Sequence[VadJob]) -> list[Outcome]:
    """Run each job; a job's fault is its own session's, never its neighbours'.

    Jobs of a batching model (the FSMN) are scored together: one model call per group
    of streams with as many frames, so the per-call overhead is paid once per tick.
    """
    outcomes: dict[int, Outcome] = {}
    batching: dict[int, tuple[BatchingVadModel, list[int]]] = {}
    for index, job in enumerate(jobs):
        if isinstance(job.model, BatchingVadModel):
            batching.setdefault(id(job.model), (job.model, []))[1].append(index)
            continue
        try:
            outcomes[index] = job.run()
        except Exception as exc:  # noqa: BLE001 - handed back to that one session
            outcomes[index] = exc
    for model, members in batching.values():
        together = _run_together(model, [jobs[i] for i in members])
        outcomes.update(zip(members, together, strict=True))
    return [outcomes[index] for index in range(len(jobs))]


def _run_together(model: BatchingVadModel, jobs: Sequence[VadJob]) -> list[Outcome]:
    """Prepare each job, score them all in one go, finish each; faults stay per job."""
    outcomes: list[Outcome] = []
    prepared: dict[int, Any] = {}
    for index, job in enumerate(jobs):
        try:
            prepared[index] = model.prepare(job.stream, job.block_samples())
            outcomes.append(())
        except Exception as exc:  # noqa: BLE001 - handed back to that one session
            outcomes.append(exc)
    try:
        model.score(list(prepared.values()))
    except Exception as exc:  # noqa: BLE001 - every session scored in that call
        return [exc if i in prepared else outcome for i, outcome in enumerate(outcomes)]
    for index, item in prepared.items():
        try:
            outcomes[index] = jobs[index].steps(model.finish(item))
        except Exception as exc:  # noqa: BLE001 - handed back to that one session
            outcomes[index] = exc
    return outcomes


class VadPump:
    """One VAD thread for the app; `notify` is cheap and may be called for every frame."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vad")
        self._waiting: dict[VadClient, None] = {}  # insertion-ordered set
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="vad-pump")

    def notify(self, client: VadClient) -> None:
        self._waiting[client] = None
        self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            clients, self._waiting = list(self._waiting), {}
            work = [(c, job) for c in clients if (job := c.take_vad_job()) is not None]
            if not work:
                continue
            jobs = [job for _, job in work]
            outcomes = await loop.run_in_executor(self._executor, run_jobs, jobs)
            for (client, job), outcome in zip(work, outcomes, strict=True):
                client.vad_done(job, outcome)
