"""SIGTERM in mid-stream: owed finals and `end` still arrive, new sessions get 503."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.server.conftest import ServerProcess
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
            await asyncio.sleep(0.3)
            refused = None
            try:
                async with connect(server.url, open_timeout=5):
                    pass
            except InvalidStatus as exc:
                refused = exc.response.status_code
            async for message in ws:
                events.append(json.loads(message))
            return ws.close_code, refused

    try:
        close_code, refused = asyncio.run(scenario())
    finally:
        code = server.stop()
    kinds = [e["type"] for e in events]
    assert kinds.count("final") == 2, kinds  # the finished one and the one cut by shutdown
    assert kinds[-1] == "end"
    assert close_code == 1001
    assert refused == 503
    assert code == 0


@pytest.mark.parametrize("signal_name", ["SIGINT"])
def test_sigint_with_no_sessions_exits_cleanly(tiny_model_dir: Path, signal_name: str) -> None:
    import signal

    server = ServerProcess(tiny_model_dir)
    server.proc.send_signal(getattr(signal, signal_name))
    assert server.proc.wait(timeout=60) == 0
