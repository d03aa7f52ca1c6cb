"""Settled text is never taken back (issue 33): whatever a partial calls stable is the start
of its utterance's final, for protocol v1's `stable_chars`, OpenAI Realtime's deltas and
FunASR's online increments alike, and append-only text adds up to exactly the final.

A session with the real FSMN VAD is fed the accuracy suite's files in random frame sizes,
its requests answered by the demo model's real decodes after random delays (so answers
overtake each other, and early decodes and partials race finals), and its events are
encoded by the real codecs.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.decoding.recognizer import Recognizer
from engine.types import SAMPLE_RATE, InferenceRequest, InferenceResult
from streaming.audio.decoder import AudioFormat
from streaming.commands import Audio, Configure, StreamOptions
from streaming.events import Final, Partial, SessionEvent
from streaming.limits import SessionLimits
from streaming.protocols.base import Handshake
from streaming.protocols.funasr.codec import FunasrCodec
from streaming.protocols.openai.realtime import OpenAIRealtimeCodec
from streaming.session import Session, SessionConfig
from streaming.vad.fsmn import FsmnVadModel
from tests.accuracy.corpus import AudioFile, make_test_set
from tests.accuracy.paths import LANGUAGE
from tests.speech import to_s16le

FRAMES_MS = (20, 60, 100, 250, 500)


@pytest.fixture(scope="module")
def fsmn() -> FsmnVadModel:
    return FsmnVadModel.from_package()


@pytest.fixture(scope="module")
def files() -> list[AudioFile]:
    return make_test_set()


def stream(
    recognizer: Recognizer,
    vad: FsmnVadModel,
    audio: np.ndarray,
    frame_ms: int,
    rng: random.Random,
) -> list[SessionEvent]:
    """The session's events for `audio` in `frame_ms` frames at real time; each request is
    answered by the demo model 0 to 3 frames after it was made, in that order."""
    session = Session("p", SessionConfig(), vad)
    options = StreamOptions(language=LANGUAGE, itn=True)
    session.handle(Configure(AudioFormat("pcm_s16le", SAMPLE_RATE, 1), options), 0.0)
    pcm = to_s16le(audio)
    step = frame_ms * SAMPLE_RATE * 2 // 1000
    waiting: list[tuple[int, InferenceRequest]] = []
    events: list[SessionEvent] = []
    for index, offset in enumerate(range(0, len(pcm), step)):
        now = index * frame_ms / 1000
        session.handle(Audio(pcm[offset : offset + step]), now)
        waiting += [(index + rng.randint(0, 3), r) for r in session.requests_to_submit()]
        waiting = answer(recognizer, session, waiting, index, now)
        events += session.events_to_send()
    session.end_of_stream(len(pcm) / (2 * SAMPLE_RATE))
    waiting += [(0, r) for r in session.requests_to_submit()]
    while waiting:  # everything still owed, answered in the order it was asked
        answer(recognizer, session, waiting, len(pcm), 0.0)
        waiting = [(0, r) for r in session.requests_to_submit()]
        events += session.events_to_send()
    events += session.events_to_send()
    assert session.finished
    return events


def answer(
    recognizer: Recognizer,
    session: Session,
    waiting: list[tuple[int, InferenceRequest]],
    index: int,
    now: float,
) -> list[tuple[int, InferenceRequest]]:
    """Answer the requests due by frame `index`; the rest keep waiting."""
    due = [r for at, r in waiting if at <= index]
    for request in due:
        utterance = recognizer.prepare(request.audio, request.options)
        transcript = recognizer.decode([utterance])[0]
        session.receive_result(InferenceResult(request.ref, transcript), now)
    return [(at, r) for at, r in waiting if at > index]


def check_v1(events: list[SessionEvent]) -> int:
    """Every partial's stable prefix starts its final; returns how many partials came."""
    finals = {e.utt_id: e.transcript.text for e in events if isinstance(e, Final)}
    partials = [e for e in events if isinstance(e, Partial)]
    for event in partials:
        stable = event.text[: event.stable_chars]
        assert finals[event.utt_id].startswith(stable), (stable, finals[event.utt_id])
    return len(partials)


def check_openai(events: list[SessionEvent]) -> None:
    """Each item's deltas add up to exactly its completed transcript."""
    codec = OpenAIRealtimeCodec(Handshake(), SessionLimits())
    deltas: dict[str, str] = defaultdict(str)
    completed: dict[str, str] = {}
    for event in events:
        for frame in codec.encode(event):
            wire = json.loads(frame)
            if wire["type"].endswith("transcription.delta"):
                deltas[wire["item_id"]] += wire["delta"]
            elif wire["type"].endswith("transcription.completed"):
                completed[wire["item_id"]] = wire["transcript"]
    assert completed
    for item, transcript in completed.items():
        assert deltas[item] == transcript


def check_funasr_online(events: list[SessionEvent]) -> None:
    """Each utterance's online increments add up to exactly its final's text."""
    codec = FunasrCodec(SessionLimits())
    codec.decode(json.dumps({"mode": "online", "is_speaking": True}))
    shown: dict[int, str] = defaultdict(str)
    for event in events:
        for frame in codec.encode(event):
            message: dict[str, Any] = json.loads(frame)
            if message["mode"] == "2pass-online" and isinstance(event, Partial | Final):
                shown[event.utt_id] += message["text"]
    for event in events:
        if isinstance(event, Final):
            assert shown[event.utt_id] == event.transcript.text


def check_all(events: list[SessionEvent]) -> int:
    partials = check_v1(events)
    check_openai(events)
    check_funasr_online(events)
    return partials


def test_no_settled_text_is_absent_from_its_final_across_the_accuracy_files(
    recognizer: Recognizer, fsmn: FsmnVadModel, files: list[AudioFile]
) -> None:
    partials = 0
    for i, file in enumerate(files):
        partials += check_all(stream(recognizer, fsmn, file.audio, 100, random.Random(i)))
    # The property was put to the test: partials ran beside the finals and their answers
    # overtook each other (revisions between partials are common on these files).
    assert partials > len(files)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(
    file_index=st.integers(0, 3),
    frame_ms=st.sampled_from(FRAMES_MS),
    seed=st.integers(0, 2**16),
)
def test_settled_text_holds_under_any_growth_and_answer_order(
    recognizer: Recognizer,
    fsmn: FsmnVadModel,
    files: list[AudioFile],
    file_index: int,
    frame_ms: int,
    seed: int,
) -> None:
    audio = files[file_index % len(files)].audio
    check_all(stream(recognizer, fsmn, audio, frame_ms, random.Random(seed)))
