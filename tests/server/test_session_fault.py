"""A fault inside one session's core ends that session alone: internal_error, 1011, freed.

The server runs in this process so the test can wrap its real FSMN VAD in one whose
streams raise on full-scale audio, a stand-in for any bug of ours below the connection
(a VAD fault, an overwritten ring buffer). Speech never reaches full scale, so the healthy
neighbour is untouched.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import numpy as np
import pytest

from sensestream.client import Outcome, run_session
from tests.server.inprocess import HookedVadModel, serving
from tests.speech import Clip, to_s16le

SR = 16000


def fail_on_full_scale(samples: np.ndarray) -> None:
    if samples.size and float(np.abs(samples).max()) > 0.99:
        raise RuntimeError("injected VAD fault")


def speech(clips: list[Clip]) -> bytes:
    gap = np.zeros(SR, np.float32)
    return to_s16le(np.concatenate([gap, clips[0].audio, gap]))


def full_scale(seconds: float) -> bytes:
    square = np.sign(np.sin(np.arange(int(seconds * SR)) * 2 * np.pi * 200 / SR))
    return to_s16le(square.astype(np.float32) * 0.999)


async def scenario(tiny_model_dir: Path, clips: list[Clip]) -> dict[str, object]:
    async with serving(tiny_model_dir, max_batch="1") as (app, url):
        assert app.vad is not None
        app.vad = HookedVadModel(app.vad, fail_on_full_scale)
        victim, healthy = await asyncio.gather(
            run_session(url, speech(clips)[:SR] + full_scale(2.0), speed=2.0, linger=30),
            run_session(url, speech(clips), speed=2.0, linger=60),
        )
        fresh = await run_session(url, speech(clips), linger=60)
        # The server's count lags a client's close a little; a fresh session later, a
        # session freed at its boundary is long gone (a leaked one stays until shutdown).
        open_ids = set(app.sessions)
    return {"victim": victim, "healthy": healthy, "fresh": fresh, "open_ids": open_ids}


def test_a_fault_in_one_session_ends_it_alone_with_internal_error(
    tiny_model_dir: Path, speech_clips: list[Clip], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="sensestream"):
        out = asyncio.run(scenario(tiny_model_dir, speech_clips))
    victim = out["victim"]
    assert isinstance(victim, Outcome)
    assert [e["code"] for e in victim.of("error")] == ["internal_error"], victim.events
    assert victim.close_code == 1011
    session_id = victim.of("ready")[0]["session_id"]
    assert session_id not in out["open_ids"], "the failed session must not stay counted"
    lines = [r for r in caplog.records if session_id in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.ERROR], [r.getMessage() for r in lines]
    assert "injected VAD fault" in lines[0].getMessage()
    for name in ("healthy", "fresh"):
        outcome = out[name]
        assert isinstance(outcome, Outcome)
        assert len(outcome.of("final")) == 1 and not outcome.of("error"), outcome.events
        assert outcome.events[-1]["type"] == "end" and outcome.close_code == 1000
