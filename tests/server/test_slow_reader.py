"""A client that stops reading: partials are shed, finals pile up to a bound, then it is closed.

The server gets a small outbox (`--max-pending-events 8`) and small send buffers
(`--send-buffer-bytes 4096`); the slow client shrinks its receive buffer and lets
websockets stop reading from the socket, so TCP pushes back on the server. Meanwhile a
healthy client must get all of its finals.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from sensestream.client import Outcome, run_session
from tests.server.conftest import ServerProcess
from tests.speech import Clip, to_s16le

SR = 16000
PENDING = 8


@pytest.fixture(scope="module")
def small_outbox_server(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tiny_model_dir, "--max-pending-events", str(PENDING), "--send-buffer-bytes", "4096"
    )
    yield proc
    proc.stop()


def many_utterances(clips: list[Clip], count: int) -> np.ndarray:
    gap = np.zeros(SR, np.float32)
    parts = [gap]
    for i in range(count):
        parts += [clips[i % 3].audio, gap]
    return np.concatenate(parts)


def tiny_buffer_socket(port: int) -> socket.socket:
    """A connected socket whose receive window is as small as the kernel allows."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


async def never_reads(server: ServerProcess, audio: bytes) -> tuple[list[dict], int | None]:
    """Stream every utterance at full speed without reading; then read what is left."""
    sock = tiny_buffer_socket(server.port)
    # max_queue=1: once one message is unread, websockets stops reading the socket.
    async with connect(server.url, sock=sock, compression=None, max_queue=1) as ws:
        await ws.send(json.dumps({"type": "start", "pace": "replay"}))
        try:
            for at in range(0, len(audio), 3200):
                await ws.send(audio[at : at + 3200])
            await ws.send(json.dumps({"type": "stop"}))
        except ConnectionClosed:
            pass  # the server gave up on us while we were still sending
        # The server dropped us while we were sending (it reads and discards after that);
        # a short pause, then read: the error and close must still be there, within the
        # server's 5 s grace even when this machine is slow to push 6 MB through.
        await asyncio.sleep(0.5)
        events: list[dict] = []
        try:
            async for message in ws:
                events.append(json.loads(message))
        except ConnectionClosed:
            pass
        return events, ws.close_code


def test_a_client_that_stops_reading_is_closed_and_others_are_served(
    small_outbox_server: ServerProcess, speech_clips: list[Clip]
) -> None:
    server = small_outbox_server
    slow_audio = to_s16le(many_utterances(speech_clips, 60))
    healthy_audio = to_s16le(many_utterances(speech_clips, 3))

    async def both() -> tuple[tuple[list[dict], int | None], Outcome]:
        healthy = run_session(server.url, healthy_audio, speed=4.0)
        return await asyncio.gather(never_reads(server, slow_audio), healthy)

    (events, close_code), healthy = asyncio.run(both())
    errors = [e for e in events if e["type"] == "error"]
    assert close_code == 1008, (close_code, errors, len(events))
    assert [e["code"] for e in errors] == ["slow_client"], errors
    assert "not reading" in errors[0]["message"]
    assert not any(e["type"] == "end" for e in events)

    # The healthy session streamed alongside and got every final, then `end`.
    assert len(healthy.of("final")) == 3, healthy.events
    assert healthy.events[-1]["type"] == "end" and healthy.close_code == 1000

    fresh = asyncio.run(run_session(server.url, healthy_audio))
    assert len(fresh.of("final")) == 3 and fresh.close_code == 1000

    stats = json.loads(server.http("/stats")[1])
    assert stats["queue"]["depth"] == 0, stats
    metrics = server.http("/metrics")[1]
    assert 'code="slow_client"' in metrics
