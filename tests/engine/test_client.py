"""EngineClient: what the server may ask of an engine, answered by the in-process AsyncEngine."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine.backends.registry import BackendOptions, create_backend
from engine.client import EngineClient, EngineSnapshot
from engine.decoding.recognizer import Recognizer
from engine.model.directory import load_model_dir
from engine.types import DecodeOptions, InferenceRequest, RequestKind
from tests.engine.serving.test_async_engine import make_engine
from tests.speech import Clip


@pytest.fixture(scope="module")
def recognizer(tiny_model_dir: Path) -> Recognizer:
    model_dir = load_model_dir(tiny_model_dir)
    return Recognizer(model_dir, create_backend(model_dir, BackendOptions(precision="fp32")))


def test_the_snapshot_counts_what_the_engine_did(
    recognizer: Recognizer, speech_clips: list[Clip]
) -> None:
    audio = speech_clips[0].audio

    async def main() -> tuple[EngineSnapshot, EngineSnapshot]:
        engine: EngineClient = make_engine(recognizer)  # the server's view of it
        engine.start()
        before = engine.snapshot()
        results = engine.open_session("s")
        now = asyncio.get_running_loop().time()
        engine.submit(InferenceRequest("s", 0, RequestKind.FINAL, audio, DecodeOptions(), now))
        await asyncio.wait_for(results.get(), 60)
        after = engine.snapshot()
        await engine.close(timeout=10)
        return before, after

    before, after = asyncio.run(main())
    assert before.batches == 0 and before.queued == 0 and before.healthy
    assert set(before.audio_s_by_kind) == {k.value for k in RequestKind}
    assert after.batches == 1 and after.queued == 0 and after.in_use_bytes == 0
    assert after.audio_s_by_kind["final"] == round(len(audio) / 16000, 1)
    stats = after.to_stats()
    assert stats["batches"]["count"] == 1 and stats["devices"][0]["device"] == "cpu"
    assert stats["memory"]["budget_bytes"] == 2 << 30 and stats["healthy"] is True
