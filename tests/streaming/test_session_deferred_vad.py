"""A session whose VAD runs elsewhere (`defer_vad`) behaves exactly as one whose VAD runs
inline: real FSMN VAD, real espeak speech, jobs of one or several blocks, and commands
that arrive while a job is out wait for its verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from engine.types import InferenceRequest
from streaming.audio.decoder import AudioFormat
from streaming.commands import Audio, Command, Commit, Configure, Mark, Stop
from streaming.core import SessionCore
from streaming.errors import InvalidFieldError
from streaming.events import (
    Ended,
    ErrorEvent,
    Final,
    Marked,
    SessionEvent,
    SpeechStopped,
    StopCause,
)
from streaming.session import Session, SessionConfig
from streaming.vad.fsmn import FsmnVadModel
from streaming.vad.jobs import VadJob
from tests.speech import Clip, chunks, three_sentences, to_s16le
from tests.streaming.fakes import answer

FRAME = 3200  # bytes: 100 ms of s16le


@pytest.fixture(scope="module")
def fsmn() -> FsmnVadModel:
    return FsmnVadModel.from_package()


@pytest.fixture(scope="module")
def speech(speech_clips: list[Clip]) -> bytes:
    return to_s16le(three_sentences(speech_clips))


class Driver:
    """Feeds one session and answers its requests at once; runs its VAD jobs on demand."""

    def __init__(self, session: Session | SessionCore) -> None:
        self.session = session
        self.requests: list[InferenceRequest] = []
        self.events: list[SessionEvent] = []

    def send(self, command: Command, now: float) -> None:
        self.session.handle(command, now)
        self.serve()

    def judge(self, now: float) -> None:
        """As the server's pump: run jobs until none is left, each followed by the commands
        that waited for it (those wait until the audio before them has been judged)."""
        while self.session.has_deferred:
            self.session.resume(now)
        while (job := self.session.take_vad_job()) is not None:
            self.session.apply_vad(job, job.run(), now)
            while self.session.has_deferred:
                self.session.resume(now)
        self.serve()

    def serve(self) -> None:
        while requests := self.session.requests_to_submit():
            for request in requests:
                self.requests.append(request)
                self.session.receive_result(answer(request), now=0.0)
        self.events += self.session.events_to_send()


def stream(fsmn: FsmnVadModel, data: bytes, *, deferred: bool, every: int = 1) -> Driver:
    """The whole stream in 100 ms frames; a deferred VAD is run every `every` frames."""
    driver = Driver(Session("s", SessionConfig(defer_vad=deferred), fsmn))
    driver.send(Configure(), 0.0)
    for i, piece in enumerate(chunks(data, FRAME)):
        now = i * 0.1
        driver.send(Audio(piece), now)
        if deferred and i % every == every - 1:
            driver.judge(now)
    driver.send(Stop(), 99.0)
    driver.judge(99.0)
    assert driver.session.finished
    return driver


def job_out(fsmn: FsmnVadModel, audio: bytes, now: float) -> tuple[Driver, VadJob]:
    """A deferred session given `audio` in one frame, with its VAD job taken and not back."""
    driver = Driver(Session("s", SessionConfig(defer_vad=True), fsmn))
    driver.send(Configure(), 0.0)
    driver.send(Audio(audio), now)
    job = driver.session.take_vad_job()
    assert job is not None
    return driver, job


def shape(driver: Driver) -> tuple[list[tuple[object, ...]], list[SessionEvent]]:
    requests = [(r.kind, r.utterance_id, r.start_sample, r.num_samples) for r in driver.requests]
    return requests, driver.events


def test_deferred_vad_gives_the_inline_requests_and_events(
    fsmn: FsmnVadModel, speech: bytes
) -> None:
    inline = stream(fsmn, speech, deferred=False)
    deferred = stream(fsmn, speech, deferred=True, every=1)
    assert sum(isinstance(e, Final) for e in inline.events) == 3
    assert shape(deferred) == shape(inline)


@pytest.mark.parametrize("every", [3, 7])
def test_jobs_of_several_blocks_give_the_same_requests_and_finals(
    fsmn: FsmnVadModel, speech: bytes, every: int
) -> None:
    """The same decodes; only partials answered after their utterance closed go unshown,
    as with any engine that answers late."""
    inline = stream(fsmn, speech, deferred=False)
    deferred = stream(fsmn, speech, deferred=True, every=every)
    assert shape(deferred)[0] == shape(inline)[0]
    finals = [[e for e in d.events if isinstance(e, Final)] for d in (inline, deferred)]
    assert finals[1] == finals[0] and len(finals[0]) == 3


def test_audio_only_fills_the_ring_until_a_job_runs(fsmn: FsmnVadModel, speech: bytes) -> None:
    driver = Driver(Session("s", SessionConfig(defer_vad=True), fsmn))
    driver.send(Configure(), 0.0)
    for i, piece in enumerate(chunks(speech[: 40 * FRAME], FRAME)):
        driver.send(Audio(piece), i * 0.1)
    assert driver.requests == [] and len(driver.events) == 1  # only `Configured`
    job = driver.session.take_vad_job()
    # A job is at most `max_job_blocks` long, so a backlog takes turns with live streams.
    assert job is not None and job.samples == SessionConfig().max_job_blocks * 1600
    assert driver.session.take_vad_job() is None  # one job out at a time


def test_commands_wait_in_order_for_the_job_out(fsmn: FsmnVadModel, speech: bytes) -> None:
    # Into the first sentence: speech has started by the end of this audio.
    driver, job = job_out(fsmn, speech[: 16 * FRAME], 1.0)
    driver.send(Mark("m1"), 1.0)
    driver.send(Commit(), 1.0)
    driver.send(Audio(speech[16 * FRAME : 20 * FRAME]), 2.0)  # behind the commit, so it waits
    assert not any(isinstance(e, (Marked, SpeechStopped)) for e in driver.events)
    driver.session.apply_vad(job, job.run(), 1.1)
    # The first job judged 10 of the 16 blocks before the commit: the commands wait on.
    assert not driver.session.has_deferred and not driver.session.accepting
    driver.judge(1.1)
    kinds = [type(e).__name__ for e in driver.events]
    assert kinds.index("SpeechStarted") < kinds.index("Marked") < kinds.index("SpeechStopped")
    stop = next(e for e in driver.events if isinstance(e, SpeechStopped))
    assert stop.cause is StopCause.COMMIT and stop.end_ms == 1600  # all audio before the commit
    assert driver.session.stream_samples == 20 * 1600


def test_stop_while_a_job_is_out_still_delivers_every_final(
    fsmn: FsmnVadModel, speech: bytes
) -> None:
    driver = Driver(Session("s", SessionConfig(defer_vad=True), fsmn))
    driver.send(Configure(), 0.0)
    for i, piece in enumerate(chunks(speech, 10 * FRAME)):  # a pump lagging the whole way
        driver.send(Audio(piece), i * 1.0)
    job = driver.session.take_vad_job()
    assert job is not None
    driver.session.end_of_stream(5.0)  # what a server's drain does
    assert not driver.session.stopped
    stale = job.run()
    driver.judge(5.0)  # no new job: the stop waits for this one's verdicts
    assert not driver.session.finished
    driver.session.apply_vad(job, stale, 5.0)
    driver.judge(5.0)
    assert driver.session.finished
    assert sum(isinstance(e, Final) for e in driver.events) == 3
    assert isinstance(driver.events[-1], Ended)


def test_an_abort_drops_waiting_commands_but_not_the_finals(
    fsmn: FsmnVadModel, speech: bytes
) -> None:
    driver, job = job_out(fsmn, speech[: 30 * FRAME], 3.0)
    driver.send(Commit(), 1.0)
    driver.session.abort(InvalidFieldError("bad field"), 1.0)
    driver.session.apply_vad(job, job.run(), 1.0)
    driver.judge(1.0)
    assert isinstance(driver.events[1], ErrorEvent)
    assert not any(
        isinstance(e, SpeechStopped) and e.cause is StopCause.COMMIT for e in driver.events
    )
    assert driver.session.finished and isinstance(driver.events[-1], Ended)


def test_a_stale_job_changes_nothing(fsmn: FsmnVadModel, speech: bytes) -> None:
    driver, job = job_out(fsmn, speech[: 10 * FRAME], 1.0)
    steps = job.run()
    driver.session.apply_vad(job, steps, 0.0)
    before = driver.session.stream_samples, driver.session.owed_finals
    driver.session.apply_vad(job, steps, 0.0)  # again: the session has moved on
    assert (driver.session.stream_samples, driver.session.owed_finals) == before


def test_channel_groups_judge_inline(fsmn: FsmnVadModel, speech: bytes) -> None:
    core = SessionCore("s", SessionConfig(defer_vad=True), fsmn)
    stereo = Configure(AudioFormat("pcm_s16le", 16_000, 2), channel_labels=("agent", "customer"))
    driver = Driver(core)
    driver.send(stereo, 0.0)
    audio = np.frombuffer(speech, np.int16)
    interleaved = np.stack([audio, audio], axis=1).reshape(-1).tobytes()
    for i, piece in enumerate(chunks(interleaved, 20 * FRAME)):
        driver.send(Audio(piece), i * 1.0)
    assert core.take_vad_job() is None
    assert driver.requests  # its channels' VAD ran inline and opened utterances
