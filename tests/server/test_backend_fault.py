"""A backend that raises: only its batches' requests fail, /readyz says so, and it recovers.

The server runs in this process so the test can wrap its real backend in one that raises
for batches holding a Japanese-language request. Batches hold one request
(`--max-batch 1`), so a Japanese session's decodes fail while its neighbours' succeed.
"""

from __future__ import annotations

import asyncio
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engine.types import DecodeOptions
from sensestream.client import Outcome, run_session
from server.app import App
from server.config import ServerConfig
from tests.speech import Clip, to_s16le

SR = 16000


class FailingForJapanese:
    """The real backend, except that a batch with a `ja` request raises."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.failures = 0

    @property
    def name(self) -> str:
        return f"failing-{self.inner.name}"  # type: ignore[attr-defined]

    def run(self, feats: Sequence[np.ndarray], options: Sequence[DecodeOptions]) -> list:
        if any(o.language == "ja" for o in options):
            self.failures += 1
            raise RuntimeError("injected device fault")
        return self.inner.run(feats, options)  # type: ignore[attr-defined]


def ready_status(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


async def until_ready(port: int, deadline_s: float = 120.0) -> None:
    loop = asyncio.get_running_loop()
    give_up = loop.time() + deadline_s
    while await asyncio.to_thread(ready_status, port) != 200:
        if loop.time() > give_up:
            raise TimeoutError("the server did not become ready")
        await asyncio.sleep(0.2)


def two_utterances(clips: list[Clip]) -> bytes:
    gap = np.zeros(SR, np.float32)
    return to_s16le(np.concatenate([gap, clips[0].audio, gap, clips[1].audio, gap]))


async def scenario(tiny_model_dir: Path, audio: bytes) -> dict[str, object]:
    config = ServerConfig.from_options(
        model=str(tiny_model_dir), port=0, precision="fp32", max_batch="1"
    )
    app = App(config, dict(os.environ))
    ports: list[int] = []
    server = asyncio.create_task(app.serve(on_listening=ports.append))
    try:
        while not ports:
            await asyncio.sleep(0.05)
        port = ports[0]
        await until_ready(port)
        assert app.engine is not None
        recognizer = app.engine.recognizers[0]
        failing = FailingForJapanese(recognizer.backend)
        recognizer.backend = failing  # type: ignore[assignment]
        url = f"ws://127.0.0.1:{port}/ws"
        japanese = {"type": "start", "language": "ja"}

        alone = await run_session(url, audio, start=japanese)
        unhealthy = await asyncio.to_thread(ready_status, port)
        healthy, victim = await asyncio.gather(
            run_session(url, audio, speed=4.0), run_session(url, audio, start=japanese, speed=4.0)
        )
        fresh = await run_session(url, audio)
        recovered = await asyncio.to_thread(ready_status, port)
        return {
            "alone": alone,
            "unhealthy": unhealthy,
            "healthy": healthy,
            "victim": victim,
            "fresh": fresh,
            "recovered": recovered,
            "failures": failing.failures,
        }
    finally:
        app.request_shutdown()
        await asyncio.wait_for(server, 60)


def test_a_backend_fault_fails_only_its_batches_and_readiness_recovers(
    tiny_model_dir: Path, speech_clips: list[Clip]
) -> None:
    out = asyncio.run(scenario(tiny_model_dir, two_utterances(speech_clips)))
    alone = out["alone"]
    assert isinstance(alone, Outcome)
    assert [e["code"] for e in alone.of("error")] == ["backend_error", "backend_error"]
    assert "injected device fault" in alone.of("error")[0]["message"]
    assert alone.events[-1]["type"] == "end"
    assert out["unhealthy"] == 503
    for name in ("healthy", "fresh"):
        outcome = out[name]
        assert isinstance(outcome, Outcome)
        assert len(outcome.of("final")) == 2, (name, outcome.events)
        assert not outcome.of("error") and outcome.close_code == 1000, name
    victim = out["victim"]
    assert isinstance(victim, Outcome)
    assert victim.of("error") and not victim.of("final")
    assert out["recovered"] == 200
    assert isinstance(out["failures"], int) and out["failures"] >= 4
