"""Live sessions' VAD on the pump's thread: the same finals as inline, isolation, faults."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from sensestream.client import Outcome as Session
from sensestream.client import run_session
from server.live.vad_pump import Outcome, VadPump, run_jobs
from streaming.vad.fsmn import FsmnVadModel
from streaming.vad.jobs import VadJob
from streaming.vad.types import BlockVerdict, VadConfig, VadEvent, accept_each
from tests.server.conftest import ServerProcess
from tests.speech import Clip, three_sentences, to_s16le

SR = 16000


@pytest.fixture(scope="module")
def pumped(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tiny_model_dir, "--vad-thread")
    yield proc
    proc.stop()


def spans_and_texts(url: str, audio: bytes) -> list[tuple[int, int, str]]:
    return finals_of(asyncio.run(run_session(url, audio, chunk=3200, speed=50)))  # under 200x


def finals_of(outcome: Session) -> list[tuple[int, int, str]]:
    """A finished session's finals as (start_ms, end_ms, text)."""
    errors = [e for e in outcome.events if e["type"] == "error"]
    assert outcome.events[-1]["type"] == "end" and outcome.close_code == 1000, errors
    return [(f["start_ms"], f["end_ms"], f["text"]) for f in outcome.of("final")]


def test_the_same_finals_as_the_inline_vad(
    server: ServerProcess, pumped: ServerProcess, speech_clips: list[Clip]
) -> None:
    audio = to_s16le(three_sentences(speech_clips))
    inline = spans_and_texts(server.url, audio)
    assert len(inline) == 3
    assert spans_and_texts(pumped.url, audio) == inline


def test_twenty_concurrent_sessions_each_get_their_own_finals(
    pumped: ServerProcess, speech_clips: list[Clip]
) -> None:
    # Twenty different recordings: eight clips, each session's speech starting 30 ms later
    # than the one before, so every session's finals (spans and texts) are its own.
    audios = [
        to_s16le(
            np.concatenate(
                [
                    np.zeros(SR // 2 + 480 * i, np.float32),
                    speech_clips[i % len(speech_clips)].audio,
                    np.zeros(SR, np.float32),
                ]
            )
        )
        for i in range(20)
    ]
    # What each recording gives on its own, one session at a time.
    alone = [spans_and_texts(pumped.url, a) for a in audios]
    assert all(alone) and len({tuple(f) for f in alone}) == 20, alone

    async def all_sessions() -> list[Session]:
        return await asyncio.gather(
            *(run_session(pumped.url, a, chunk=3200, speed=50) for a in audios)
        )

    together = [finals_of(outcome) for outcome in asyncio.run(all_sessions())]
    for i, (own, expected) in enumerate(zip(together, alone, strict=True)):
        assert own == expected, i


class Detector:
    """A detector that hears nothing, or fails on its second block; it notes its threads."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.blocks = 0
        self.threads: set[int] = set()  # where each block was detected in

    def accept(self, samples: np.ndarray) -> list[VadEvent]:
        self.threads.add(threading.get_ident())
        self.blocks += 1
        if self.fail and self.blocks == 2:
            raise ValueError("detector fault")
        return []

    def accept_blocks(self, blocks: Sequence[np.ndarray]) -> list[BlockVerdict]:
        return accept_each(self, blocks)

    def flush(self) -> list[VadEvent]:
        return []

    def pending_end(self) -> int | None:
        return self.blocks * 1600


def job(detector: Detector, blocks: int = 3) -> VadJob:
    return VadJob(
        detector, tuple(((i + 1) * 1600, np.zeros(1600, np.float32)) for i in range(blocks))
    )


def test_a_faulty_job_is_its_own_sessions_alone() -> None:
    healthy, faulty = Detector(), Detector(fail=True)
    outcomes = run_jobs([job(healthy), job(faulty), job(Detector(), blocks=1)])
    assert [step.pending_end for step in outcomes[0]] == [1600, 3200, 4800]  # type: ignore[union-attr]
    assert isinstance(outcomes[1], ValueError)
    assert len(outcomes[2]) == 1  # type: ignore[arg-type]


def test_fsmn_jobs_are_scored_together_and_a_fault_stays_its_own(
    speech_clips: list[Clip],
) -> None:
    model = FsmnVadModel.from_package()
    audio = three_sentences(speech_clips)
    blocks = tuple(((i + 1) * 1600, audio[i * 1600 : (i + 1) * 1600]) for i in range(40))
    alone = VadJob(model.new_stream(VadConfig()), blocks, model).run()
    closed = model.new_stream(VadConfig())
    closed.flush()  # a stream past its end: its prepare raises
    jobs = [VadJob(model.new_stream(VadConfig()), blocks, model) for _ in range(3)]
    outcomes = run_jobs([jobs[0], VadJob(closed, blocks, model), *jobs[1:]])
    assert isinstance(outcomes[1], RuntimeError)
    assert outcomes[0] == outcomes[2] == outcomes[3] == alone
    assert any(step.events for step in alone)


class Client:
    """A connection's side of the pump: one job to give, and what came back."""

    def __init__(self, work: VadJob | None) -> None:
        self.work = work
        self.done: asyncio.Future[Outcome] | None = None

    def take_vad_job(self) -> VadJob | None:
        work, self.work = self.work, None
        return work

    def vad_done(self, job: VadJob, outcome: Outcome) -> None:
        if self.done is not None:
            self.done.set_result(outcome)


def test_the_pump_runs_each_notified_clients_job_off_the_loop() -> None:
    detector = Detector()

    async def scenario() -> tuple[Outcome, bool, int]:
        pump = VadPump()
        pump.start()
        loop = asyncio.get_running_loop()
        busy, idle = Client(job(detector)), Client(None)
        busy.done = loop.create_future()
        idle.done = loop.create_future()
        pump.notify(busy)
        pump.notify(idle)
        outcome = await asyncio.wait_for(busy.done, 10)
        await pump.close()  # the idle one was asked in the same round, and gave nothing
        return outcome, idle.done.done(), threading.get_ident()

    outcome, idle_called, loop_thread = asyncio.run(scenario())
    assert not isinstance(outcome, Exception) and len(outcome) == 3
    assert detector.blocks == 3
    # Every block was detected in on one thread, and not on the loop's.
    assert len(detector.threads) == 1 and loop_thread not in detector.threads
    assert not idle_called
