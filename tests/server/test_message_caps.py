"""One client's messages cannot stall the event loop every stream of a worker shares.

A Realtime client sends `session.update`s naming 200,000 keywords (2 MB) again and again,
reconnecting whenever it is closed, and between them updates just under the size cap with
25,000 keywords, while a second connection pings the server. Every pong must come back
quickly; the event loop's own CPU time per message must stay small (what a shared host
cannot inflate); the oversized update must end its connection (1009), and the long list
be refused as a plain field error.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websockets
from websockets.sync.client import connect

from streaming.protocols.openai.frames import MAX_EVENT_BYTES
from tests.server.conftest import ServerProcess
from tests.server.test_server import thread_cpu_s

#: Before the caps, each of these took over a second of the event loop to refuse.
HUGE_KEYWORDS = 200_000
#: As many keywords as fit under the cap: each once took about 30 ms to refuse.
NEAR_KEYWORDS = 25_000
ROUNDS = 5
#: The longest a ping may wait for its pong while the flood goes on. Each refusal costs
#: the loop a few milliseconds; the rest is room for a busy host's scheduling. (Before the
#: caps, a pong waited over a second behind each oversized update.)
MAX_PONG_S = 0.1
#: The event loop's CPU time per flooding message, at most.
MAX_CPU_PER_MESSAGE_S = 0.02


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tiny_model_dir)
    yield proc
    proc.stop()


def url(server: ServerProcess) -> str:
    return f"ws://127.0.0.1:{server.port}/v1/realtime?intent=transcription"


def keywords_update(count: int) -> str:
    transcription = {"keywords": [f"w{i}" for i in range(count)]}
    session = {"type": "transcription", "audio": {"input": {"transcription": transcription}}}
    return json.dumps({"type": "session.update", "session": session})


def answer(address: str, message: str) -> tuple[str, int | None]:
    """Send `message` on a new connection: the error code that answers it, and the close
    code when the server then ends the connection (None when it goes on)."""
    with connect(address, max_size=None, open_timeout=10) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "session.created"
        ws.send(message)
        event = json.loads(ws.recv(timeout=10))
        assert event["type"] == "error", event
        try:
            # A connection that goes on answers a clear; an ended one has closed instead.
            ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
            cleared = json.loads(ws.recv(timeout=10))
        except websockets.ConnectionClosed:
            assert ws.protocol.close_rcvd is not None
            return event["error"]["code"], ws.protocol.close_rcvd.code
        assert cleared["type"] == "input_audio_buffer.cleared"
        return event["error"]["code"], None


def flood(address: str, messages: list[str], done: threading.Event) -> list[Any]:
    try:
        return [answer(address, message) for message in messages]
    finally:
        done.set()


async def pongs_during(address: str, messages: list[str]) -> tuple[list[float], list[Any]]:
    """Ping the server on a second connection for as long as `messages` are being sent."""
    done = threading.Event()
    waits: list[float] = []
    async with websockets.connect(address) as ws:
        await ws.recv()  # session.created
        answers = asyncio.create_task(asyncio.to_thread(flood, address, messages, done))
        while not done.is_set():
            sent = time.perf_counter()
            await asyncio.wait_for(await ws.ping(), 30)
            waits.append(time.perf_counter() - sent)
            await asyncio.sleep(0.005)  # the probe's pace: about 200 pings a second
        return waits, await answers


def test_floods_of_large_updates_leave_the_event_loop_free(server: ServerProcess) -> None:
    huge, near = keywords_update(HUGE_KEYWORDS), keywords_update(NEAR_KEYWORDS)
    assert len(huge) > 4 * MAX_EVENT_BYTES and 0.8 * MAX_EVENT_BYTES < len(near) < MAX_EVENT_BYTES
    messages = [huge, near] * ROUNDS
    pid = server.proc.pid  # one process: its event loop runs on its main thread
    cpu_before = thread_cpu_s(pid, pid)
    waits, answers = asyncio.run(asyncio.wait_for(pongs_during(url(server), messages), 60))
    cpu_per_message = (thread_cpu_s(pid, pid) - cpu_before) / len(messages)
    assert len(waits) > 5
    assert max(waits) < MAX_PONG_S, f"a pong took {max(waits) * 1000:.0f} ms"
    assert cpu_per_message < MAX_CPU_PER_MESSAGE_S, f"{cpu_per_message * 1000:.0f} ms a message"
    assert answers == [("frame_too_large", 1009), ("invalid_value", None)] * ROUNDS
