"""SIGTERM in mid-stream: owed finals and `end` still arrive, new sessions get 503."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from engine.types import InferenceRequest, RequestKind
from tests.server.conftest import ServerProcess
from tests.server.inprocess import serving
from tests.speech import Clip, to_s16le

SR = 16000


def test_sigterm_mid_stream_delivers_owed_finals_then_end(
    tiny_model_dir: Path, speech_clips: list[Clip]
) -> None:
    server = ServerProcess(tiny_model_dir)
    first, second = speech_clips[1].audio, speech_clips[6].audio
    gap = np.zeros(int(1.5 * SR), np.float32)
    audio = to_s16le(np.concatenate([np.zeros(SR // 2, np.float32), first, gap, second]))
    events: list[dict] = []

    async def scenario() -> tuple[int | None, int | None]:
        async with connect(server.url, compression=None) as ws:
            sent = 0
            # Real time until we are inside the second utterance, then SIGTERM.
            while sent < len(audio):
                await ws.send(audio[sent : sent + 3200])
                sent += 3200
                await asyncio.sleep(0.1)
                if sent > (len(first) + len(gap) + SR // 2 + 2 * SR) * 2:
                    break
            server.terminate()
            async for message in ws:
                events.append(json.loads(message))
            return ws.close_code

    try:
        close_code = asyncio.run(scenario())
    finally:
        code = server.stop()
    kinds = [e["type"] for e in events]
    assert kinds.count("final") == 2, kinds  # the finished one and the one cut by shutdown
    assert kinds[-1] == "end"
    assert close_code == 1001
    assert code == 0


def test_new_sessions_get_503_while_owed_finals_drain(
    tiny_model_dir: Path, speech_clips: list[Clip]
) -> None:
    """Finals are held in the engine, so the drain is certainly under way when a client comes."""
    audio = to_s16le(np.concatenate([speech_clips[1].audio, np.zeros(SR, np.float32)]))

    async def scenario() -> tuple[int | None, list[dict], int | None]:
        async with serving(tiny_model_dir) as (app, url):
            engine = app.engine
            held: list = []
            release, owed = asyncio.Event(), asyncio.Event()
            submit = engine.submit

            def hold_finals(request: InferenceRequest) -> None:
                if request.kind is RequestKind.PARTIAL:
                    return submit(request)
                held.append(request)
                owed.set()
                if release.is_set():
                    submit(request)

            engine.submit = hold_finals  # type: ignore[method-assign]
            async with connect(url, compression=None) as ws:
                await ws.send(json.dumps({"type": "start", "pace": "replay"}))
                for i in range(0, len(audio), 3200):
                    await ws.send(audio[i : i + 3200])
                await asyncio.wait_for(owed.wait(), 60)
                app.request_shutdown()  # the session is owed its final: the drain waits
                refused = None
                try:
                    async with connect(url, open_timeout=5):
                        pass
                except InvalidStatus as exc:
                    refused = exc.response.status_code
                release.set()
                for request in held:
                    submit(request)
                events = [json.loads(m) async for m in ws]
                return refused, events, ws.close_code

    refused, events, close_code = asyncio.run(scenario())
    assert refused == 503
    kinds = [e["type"] for e in events]
    assert "final" in kinds and kinds[-1] == "end" and close_code == 1001


@pytest.mark.parametrize("signal_name", ["SIGINT"])
def test_sigint_with_no_sessions_exits_cleanly(tiny_model_dir: Path, signal_name: str) -> None:
    import signal

    server = ServerProcess(tiny_model_dir)
    server.proc.send_signal(getattr(signal, signal_name))
    assert server.proc.wait(timeout=60) == 0
