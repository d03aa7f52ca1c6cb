"""Backpressure in the session core: audio faster than the VAD or the engine is held, never
overwritten or refused (real FSMN VAD, real espeak speech)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.types import InferenceRequest
from streaming.audio.decoder import AudioFormat
from streaming.commands import Audio, Configure, Stop, StreamOptions
from streaming.events import ErrorEvent, Final
from streaming.session import Session, SessionConfig
from streaming.vad.fsmn import FsmnVadModel
from tests.speech import Clip, chunks, three_sentences, to_s16le
from tests.streaming.fakes import answer
from tools.g711 import encode_mulaw

FRAME = 3200  # bytes: 100 ms of s16le
BIG_FRAME = 256 * 1024  # the default frame cap: 8.2 s of s16le, 32.8 s of 8 kHz mu-law


@pytest.fixture(scope="module")
def fsmn() -> FsmnVadModel:
    return FsmnVadModel.from_package()


@pytest.fixture(scope="module")
def speech(speech_clips: list[Clip]) -> np.ndarray:
    """About 35 s: three sentences, three times over."""
    return np.concatenate([three_sentences(speech_clips)] * 3)


def drive(session: Session, frames: list[bytes], fmt: AudioFormat) -> list[Final]:
    """Feed every frame (answering requests at once, running jobs when the session stops
    accepting, as the server's pump and reader do), then stop; the finals."""
    requests: list[InferenceRequest] = []
    events = []

    def serve() -> None:
        nonlocal events
        while batch := session.requests_to_submit():
            requests.extend(batch)
            for request in batch:
                session.receive_result(answer(request), 0.0)
        events += session.events_to_send()

    def judge() -> None:
        while (job := session.take_vad_job()) is not None:
            session.apply_vad(job, job.run(), 0.0)
            while session.has_deferred:
                session.resume(0.0)
            serve()

    session.handle(Configure(fmt), 0.0)
    for frame in frames:
        while not session.accepting:
            judge()
        session.handle(Audio(frame), 0.0)
        serve()
    session.handle(Stop(), 0.0)
    judge()
    serve()
    assert session.finished
    assert not any(isinstance(e, ErrorEvent) for e in events)
    return [e for e in events if isinstance(e, Final)]


def replay(deferred: bool) -> SessionConfig:
    return SessionConfig(defer_vad=deferred)


def test_a_frame_longer_than_the_ring_is_judged_a_piece_at_a_time(
    fsmn: FsmnVadModel, speech: np.ndarray
) -> None:
    # 8 kHz mu-law: one frame at the default cap is 32.8 s of audio, more than the whole
    # ring (25 s); written whole, its start was overwritten before the VAD read it.
    data = encode_mulaw(speech[::2])
    fmt = AudioFormat("mulaw", 8000, 1)
    small = drive(Session("a", replay(False), fsmn), chunks(data, 800), fmt)
    big = drive(Session("b", replay(False), fsmn), chunks(data, BIG_FRAME), fmt)
    assert len(small) >= 6
    assert [(f.start_ms, f.end_ms, f.transcript.text) for f in big] == [
        (f.start_ms, f.end_ms, f.transcript.text) for f in small
    ]


def test_a_vad_far_behind_holds_audio_instead_of_overwriting_it(
    fsmn: FsmnVadModel, speech: np.ndarray
) -> None:
    data = to_s16le(speech)
    inline = drive(Session("a", replay(False), fsmn), chunks(data, FRAME), AudioFormat())
    session = Session("b", replay(True), fsmn)
    session.handle(Configure(), 0.0)
    # Four of the largest frames with no VAD job run at all: 33 s, more than the ring.
    for frame in chunks(data, BIG_FRAME)[:4]:
        session.handle(Audio(frame), 0.0)
    assert not session.accepting  # the server stops reading this client here
    assert session.stream_samples <= SessionConfig().margin_samples
    rest = chunks(data, BIG_FRAME)[4:]
    deferred = drive_on(session, rest)
    assert [(f.start_ms, f.end_ms) for f in deferred] == [(f.start_ms, f.end_ms) for f in inline]


def drive_on(session: Session, frames: list[bytes]) -> list[Final]:
    """`drive` for a session already configured and fed."""
    events = []
    while True:
        while batch := session.requests_to_submit():
            for request in batch:
                session.receive_result(answer(request), 0.0)
        events += session.events_to_send()
        job = session.take_vad_job()
        if job is not None:
            session.apply_vad(job, job.run(), 0.0)
            while session.has_deferred:
                session.resume(0.0)
            continue
        if frames and session.accepting:
            session.handle(Audio(frames.pop(0)), 0.0)
            continue
        if not frames and not session.stopped:
            session.handle(Stop(), 0.0)
            continue
        break
    assert session.finished
    return [e for e in events if isinstance(e, Final)]


def test_owed_finals_stop_the_reading_until_the_engine_answers(
    fsmn: FsmnVadModel, speech: np.ndarray
) -> None:
    config = SessionConfig(max_owed_finals=2)
    session = Session("s", config, fsmn)
    session.handle(Configure(), 0.0)
    held: list[InferenceRequest] = []
    for frame in chunks(to_s16le(speech), FRAME):
        if not session.accepting:
            break
        session.handle(Audio(frame), 0.0)
        held += [r for r in session.requests_to_submit() if r.kind.value != "partial"]
    assert session.owed_finals == 2 and not session.accepting
    for request in held:
        session.receive_result(answer(request), 0.0)
    assert session.owed_finals < 2 and session.accepting


@pytest.mark.parametrize(("pace", "bulk"), [("replay", True), ("live", False)])
def test_a_replays_requests_queue_as_bulk_work(
    fsmn: FsmnVadModel, speech: np.ndarray, pace: str, bulk: bool
) -> None:
    session = Session("s", SessionConfig(), fsmn)
    session.handle(Configure(AudioFormat(), StreamOptions(pace=pace)), 0.0)
    requests: list[InferenceRequest] = []
    for frame in chunks(to_s16le(speech[: 12 * 16000]), FRAME):
        session.handle(Audio(frame), 0.0)
        requests += session.requests_to_submit()
    assert requests and all(r.bulk is bulk for r in requests)
