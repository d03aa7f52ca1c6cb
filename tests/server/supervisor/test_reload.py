"""SIGHUP to `python -m server --workers 2`: the workers are replaced one at a time while
8 v1 streams and 2 AudioHook calls run, and every stream goes on with every final once.

v1 streams are handed over (their clients resume on the worker that goes on with them,
at a pause between utterances): their finals equal an uncut run's. AudioHook calls are
asked to reconnect: each call's sessions carry its transcripts, none twice, none lost.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sensestream.client import run_session
from sensestream.resuming import Resumable, resumable_session
from tests.callcentre.audiohook_emulator import AudioHookCall, Leg, play, play_reconnecting
from tests.callcentre.call import Call, make_call
from tests.server.conftest import WORKER_READY, ServerProcess
from tests.speech import Clip, sentences_apart, to_s16le

SR = 16000
START = {"type": "start", "pace": "replay", "language": "en"}
STREAMS = 8
CALLS = 2
AUDIOHOOK_RATE = 8000
TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tiny_model_dir, "--workers", "2")  # resume grace: the default
    proc.wait_for(WORKER_READY, count=2)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def hasty(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    """Workers that hand their streams over at once, mostly mid-utterance."""
    proc = ServerProcess(tiny_model_dir, "--workers", "2", "--hand-off-s", "0")
    proc.wait_for(WORKER_READY, count=2)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def speech(speech_clips: list[Clip]) -> bytes:
    """About 30 s of English sentences, each followed by a second of quiet."""
    return to_s16le(sentences_apart(speech_clips, 30.0))


@pytest.fixture(scope="module")
def call(tmp_path_factory: pytest.TempPathFactory) -> Call:
    return make_call(tmp_path_factory.mktemp("call"))


def finals(events: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(e["utt_id"], e["text"]) for e in events if e["type"] == "final"]


def hook_call(call: Call, n: int) -> AudioHookCall:
    """The two-party call three times over (about 36 s), as conversation `n`."""
    return AudioHookCall(
        call.stereo() * 3,
        f"{n:08d}-72fa-480a-83e0-8667ff89c0ec",
        ("internal", "external"),
        speed=2.0,
    )


def seconds(duration: str) -> float:
    found = re.fullmatch(r"PT([0-9.]+)S", duration)
    assert found, duration
    return float(found.group(1))


def spans(legs: list[Leg]) -> list[tuple[int, float, float, str]]:
    """Every transcript of a call's sessions on the call's clock: channel, start, end, text."""
    out = []
    for leg in legs:
        for t in leg.run.transcripts():
            start = leg.base / AUDIOHOOK_RATE + seconds(t["offset"])
            text = t["alternatives"][0]["interpretations"][0]["transcript"]
            out.append((t["channelId"], start, start + seconds(t["duration"]), text))
    return out


def test_a_reload_hands_every_stream_on_with_every_final_once(
    server: ServerProcess, speech: bytes, call: Call
) -> None:
    async def scenario() -> tuple[Any, list[Any], list[Any]]:
        uncut = await run_session(server.url, speech, start=START, speed=10.0, pace=None)
        hook_url = server.url.removesuffix("/ws") + "/audiohook"
        whole = await play(hook_url, hook_call(call, 99))
        streams = [
            resumable_session(server.url, speech, start=START | {"stream_id": f"r{i}"}, speed=2.0)
            for i in range(STREAMS)
        ]
        calls = [play_reconnecting(hook_url, hook_call(call, i)) for i in range(CALLS)]
        running = asyncio.gather(*streams, *calls)
        await asyncio.sleep(2.0)
        server.proc.send_signal(signal.SIGHUP)
        done = await running
        return (uncut, whole), list(done[:STREAMS]), list(done[STREAMS:])

    (uncut, whole), streams, calls = asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))
    server.wait_for("reload done", timeout=30)
    expected = finals(uncut.events)
    assert len(expected) >= 5
    moved = 0
    for stream in streams:
        assert isinstance(stream, Resumable) and stream.ended
        assert finals(stream.events) == expected  # none missing, none twice, in order
        moved += len(stream.of("resumed"))
    assert moved >= STREAMS  # each handed over at least once (most twice)
    uncut_spans = spans([Leg(0, whole)])
    for legs in calls:
        assert len(legs) >= 2  # asked to reconnect, and went on in a new session
        for leg in legs:
            kinds = [m["type"] for m in leg.run.messages]
            assert "disconnect" not in kinds and kinds[-1] == "closed", kinds
        assert all(leg.run.problems == [] for leg in legs)
        got = spans(legs)
        # Nothing twice: each session's transcripts lie within the audio it carried.
        for leg, following in itertools.pairwise(legs):
            cut = following.base / AUDIOHOOK_RATE
            assert all(end <= cut + 0.05 for _, _, end, _ in spans([leg])), (cut, spans([leg]))
        # Nothing lost: what the uncut call said before the first move, this one said too.
        first_cut = legs[1].base / AUDIOHOOK_RATE
        before = [s for s in uncut_spans if s[2] < first_cut - 1.0]
        assert before and all(s in got for s in before)


def test_a_stream_handed_over_mid_utterance_has_that_utterance_heard_whole_again(
    hasty: ServerProcess, speech: bytes
) -> None:
    # With no wait for a pause the retiring worker drops the utterance in flight: the next
    # worker hears it again from the last final's end, so its final is the uncut one's
    # (a random model's text changes with any change in the audio it is given).
    async def scenario() -> tuple[Any, list[Any]]:
        uncut = await run_session(hasty.url, speech, start=START, speed=10.0, pace=None)
        streams = [
            resumable_session(hasty.url, speech, start=START | {"stream_id": f"h{i}"}, speed=2.0)
            for i in range(4)
        ]
        running = asyncio.gather(*streams)
        await asyncio.sleep(2.0)  # the streams are in their second utterance
        hasty.proc.send_signal(signal.SIGHUP)
        return uncut, list(await running)

    uncut, streams = asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))
    hasty.wait_for("reload done", timeout=30)
    expected = finals(uncut.events)
    for stream in streams:
        assert isinstance(stream, Resumable) and stream.ended
        assert finals(stream.events) == expected
        assert stream.of("resumed")
    assert hasty.wait_for("to be heard again whole")
