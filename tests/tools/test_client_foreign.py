"""The client against a server that answers in another protocol: it stops at the first answer."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection

from sensestream.client import (
    FUNASR,
    OPENAI_REALTIME,
    SessionOptions,
    WrongEndpointError,
    converse,
)
from tests.tools.test_client import fake_server

FUNASR_RESULT = {
    "mode": "2pass-online",
    "text": "w1",
    "wav_name": "wav-default-id",
    "is_final": False,
}
REALTIME_CREATED = {"type": "session.created", "event_id": "event_1_0", "session": {}}


@pytest.mark.parametrize(
    ("reply", "protocol"), [(FUNASR_RESULT, FUNASR), (REALTIME_CREATED, OPENAI_REALTIME)]
)
def test_the_first_foreign_message_ends_the_session_without_waiting_on_the_server(
    reply: dict[str, Any], protocol: str
) -> None:
    """The server answers, then reads nothing more (not even a close): the client still
    stops at once, instead of sending 10 s of audio and waiting out a closing handshake."""
    received: list[Any] = []

    async def foreign(ws: ServerConnection) -> None:
        received.append(await ws.recv())
        await ws.send(json.dumps(reply))
        ws.transport.pause_reading()
        await asyncio.sleep(3)  # longer than the client may take; then the server reads again
        ws.transport.resume_reading()

    async def scenario() -> tuple[WrongEndpointError, float]:
        async with fake_server(foreign) as url:
            options = SessionOptions(start={"type": "start"}, frame_s=0.1, speed=1.0)
            began = time.monotonic()
            try:
                await converse(url + "?token=k", [b"\0\0" * 1600] * 100, options)
            except WrongEndpointError as exc:
                return exc, time.monotonic() - began
            raise AssertionError("no WrongEndpointError")

    error, elapsed = asyncio.run(scenario())
    assert elapsed < 1.0, elapsed
    assert (error.code, error.protocol) == ("wrong_endpoint", protocol)
    assert error.suggested_url.startswith("ws://127.0.0.1:") and error.suggested_url.endswith("/ws")
    assert str(error) == f"this URL speaks {protocol}: use {error.suggested_url}"
    assert json.loads(received[0]) == {"type": "start"}
