"""A session dropped for reading too slowly costs nothing more: its audio is no longer decoded.

In this process, so the test can count the audio the dropped session's VAD still sees. A
server that kept running the VAD (and the model) on a client it had given up on spent the
grace period meant for the client on it, and on a slow machine ran out of that grace.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.server.inprocess import HookedVadModel, serving
from tests.server.test_slow_reader import many_utterances, tiny_buffer_socket
from tests.speech import Clip, to_s16le

SR = 16000


async def stream_without_reading(port: int, url: str, audio: bytes) -> tuple[int, int | None]:
    """Send everything (replay pace) without reading, then read; (bytes sent, close code)."""
    sent = 0
    async with connect(url, sock=tiny_buffer_socket(port), compression=None, max_queue=1) as ws:
        await ws.send(json.dumps({"type": "start", "pace": "replay"}))
        try:
            for at in range(0, len(audio), 3200):
                await ws.send(audio[at : at + 3200])
                sent += len(audio[at : at + 3200])
        except ConnectionClosed:
            pass
        try:
            async for _ in ws:
                pass
        except ConnectionClosed:
            pass
        return sent, ws.close_code


async def scenario(model: Path, clips: list[Clip]) -> tuple[int, int, int | None]:
    audio = to_s16le(many_utterances(clips, 60))
    async with serving(model, max_pending_events=8, send_buffer_bytes=4096) as (app, url):
        assert app.vad is not None
        seen = [0]
        app.vad = HookedVadModel(
            app.vad, lambda samples: seen.__setitem__(0, seen[0] + samples.size)
        )
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        sent, close_code = await asyncio.wait_for(stream_without_reading(port, url, audio), 120)
    return sent // 2, seen[0], close_code


def test_a_dropped_client_is_no_longer_decoded(
    tiny_model_dir: Path, speech_clips: list[Clip]
) -> None:
    sent, decoded, close_code = asyncio.run(scenario(tiny_model_dir, speech_clips))
    assert close_code == 1008
    # The outbox (8 events) overflows within the first utterances of sixty; the rest of
    # the audio the client pushed through was read and thrown away, not decoded.
    assert sent > 0.9 * len(many_utterances(speech_clips, 60))
    assert decoded < 0.5 * sent, (decoded, sent)
