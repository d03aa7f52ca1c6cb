"""Backpressure on a real server: a client sending far faster than its pace, or than the
VAD thread judges, is slowed through its socket and gets every final, never an error."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sensestream.client import Outcome, run_session
from tests.server.conftest import ServerProcess
from tests.speech import Clip, three_sentences, to_s16le

BIG_FRAME = 256 * 1024  # the default frame cap: 8.2 s of 16 kHz s16le in one message


@pytest.fixture(scope="module")
def vad_thread_server(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    """The VAD on its own thread (the default beside a GPU), where the ring overran."""
    proc = ServerProcess(tiny_model_dir, "--vad-thread")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def speech(speech_clips: list[Clip]) -> bytes:
    """About 35 s: three sentences, three times over."""
    return to_s16le(np.concatenate([three_sentences(speech_clips)] * 3))


def spans(outcome: Outcome) -> list[tuple[Any, Any]]:
    return [(f["start_ms"], f["end_ms"]) for f in outcome.of("final")]


def clean(outcome: Outcome) -> None:
    """Ended normally: no error event, `end` last, a normal close."""
    assert outcome.of("error") == [], outcome.of("error")
    assert outcome.ended and outcome.events[-1]["type"] == "end"
    assert outcome.close_code == 1000


def test_a_replay_far_faster_than_the_vad_thread_gets_every_final(
    vad_thread_server: ServerProcess, speech: bytes
) -> None:
    url = vad_thread_server.url
    start = {"type": "start", "pace": "replay"}
    steady = asyncio.run(run_session(url, speech, start=start, chunk=3200, speed=20.0))
    # Every frame at the frame cap, as fast as the socket takes them: 35 s of audio in
    # milliseconds, over the replay pace (200x) and over what one VAD thread judges.
    flood = asyncio.run(run_session(url, speech, start=start, chunk=BIG_FRAME, speed=0.0))
    clean(steady)
    clean(flood)
    assert len(spans(steady)) >= 6
    assert spans(flood) == spans(steady)


def test_a_live_stream_sent_all_at_once_is_paced_not_refused(
    vad_thread_server: ServerProcess, speech: bytes
) -> None:
    # No `pace`: a live stream, held to 2x real time after a 5 s burst. Sent at once, its
    # frames wait in the socket; it still gets all its finals, with nothing refused.
    outcome = asyncio.run(
        run_session(vad_thread_server.url, speech[: 20 * 32000], speed=0.0, pace=None)
    )
    clean(outcome)
    assert len(outcome.of("final")) >= 3
