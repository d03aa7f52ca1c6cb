"""The protocol-v1 client against a scripted in-process WebSocket server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any

import pytest
from websockets.asyncio.server import Request, Response, ServerConnection, serve
from websockets.datastructures import Headers

from sensestream.client import (
    ClientError,
    Outcome,
    RefusedError,
    SessionOptions,
    converse,
    pace_for,
    run_session,
)

Handler = Callable[[ServerConnection], Awaitable[None]]


@asynccontextmanager
async def fake_server(
    handler: Handler,
    process_request: Callable[[ServerConnection, Request], Response | None] | None = None,
) -> AsyncIterator[str]:
    async with serve(handler, "127.0.0.1", 0, process_request=process_request) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/ws"


async def protocol(ws: ServerConnection, received: list[Any] | None = None) -> None:
    """`ready` after start, a partial per frame, a final and `end` after stop, close 1000."""
    async for message in ws:
        if received is not None:
            received.append(message)
        if isinstance(message, bytes):
            await ws.send(json.dumps({"type": "partial", "utt_id": 0, "text": "w"}))
        elif json.loads(message).get("type") == "start":
            await ws.send(json.dumps({"type": "ready", "session_id": "s1"}))
        elif json.loads(message).get("type") == "stop":
            await ws.send(json.dumps({"type": "final", "utt_id": 0, "text": "words"}))
            await ws.send(json.dumps({"type": "end"}))
            await ws.close(1000)


def run(coro: Awaitable[Outcome]) -> Outcome:
    async def main() -> Outcome:
        return await coro

    return asyncio.run(main())


def test_a_session_gets_every_event_with_its_time_and_the_close_code() -> None:
    received: list[Any] = []
    shown: list[str] = []

    async def scenario() -> Outcome:
        async with fake_server(lambda ws: protocol(ws, received)) as url:
            options = SessionOptions(start={"type": "start"}, extra=("{}",))
            frames = [b"\0\0" * 1600] * 3
            return await converse(url, frames, options, on_event=lambda e: shown.append(e["type"]))

    outcome = run(scenario())
    kinds = [e["type"] for e in outcome.events]
    assert kinds == ["ready", "partial", "partial", "partial", "final", "end"]
    assert shown == kinds
    assert outcome.times == sorted(outcome.times) and len(outcome.times) == 6
    assert outcome.ended and outcome.close_code == 1000
    assert len(outcome.sent_at) == 3 and outcome.audio_done_at >= outcome.sent_at[-1]
    assert [e for e, _ in outcome.timed("final")] == outcome.of("final")
    # start, three frames, the extra message, then stop.
    assert json.loads(received[0]) == {"type": "start"}
    assert [type(m) for m in received[1:4]] == [bytes] * 3
    assert received[4:] == ["{}", '{"type": "stop"}']


def test_frames_are_paced_from_the_start_at_the_given_speed() -> None:
    async def scenario(speed: float) -> Outcome:
        async with fake_server(protocol) as url:
            options = SessionOptions(start={"type": "start"}, frame_s=0.1, speed=speed)
            return await converse(url, [b"\0\0" * 1600] * 5, options)

    paced = run(scenario(2.0))
    offsets = [t - paced.started_at for t in paced.sent_at]
    for i, offset in enumerate(offsets):
        assert i * 0.05 - 0.001 <= offset < i * 0.05 + 0.04, offsets
    flat = run(scenario(0.0))
    assert flat.sent_at[-1] - flat.started_at < 0.15


def test_a_refused_handshake_is_a_typed_error_with_the_servers_reason() -> None:
    seen: list[str | None] = []

    def refuse(ws: ServerConnection, request: Request) -> Response:
        seen.append(request.headers.get("Authorization"))
        body = b"missing or wrong API key\n"
        return Response(HTTPStatus.UNAUTHORIZED, "Unauthorized", Headers(), body)

    async def scenario() -> Outcome:
        async with fake_server(protocol, refuse) as url:
            options = SessionOptions(headers={"Authorization": "Bearer k"})
            return await converse(url, [b"\0\0"], options)

    with pytest.raises(RefusedError) as refused:
        run(scenario())
    assert refused.value.code == "unauthorized" and refused.value.status == 401
    assert str(refused.value) == "server refused the connection: 401 missing or wrong API key"
    assert seen == ["Bearer k"]


def test_an_error_close_is_recorded_not_raised() -> None:
    async def bad_input(ws: ServerConnection) -> None:
        await ws.recv()
        await ws.send(json.dumps({"type": "error", "code": "bad_audio", "message": "odd"}))
        await ws.send("not json")
        await ws.close(1008, "bad audio")

    async def scenario() -> Outcome:
        async with fake_server(bad_input) as url:
            return await run_session(url, b"\0\0" * 16000, speed=1.0)

    outcome = run(scenario())
    assert outcome.close_code == 1008
    assert [e["code"] for e in outcome.of("error")] == ["bad_audio"]
    assert outcome.malformed == ["not json"] and not outcome.ended


def test_a_server_that_never_closes_is_a_timeout_after_the_drain_time() -> None:
    async def silent(ws: ServerConnection) -> None:
        async for _ in ws:
            pass

    async def scenario() -> Outcome:
        async with fake_server(silent) as url:
            options = SessionOptions(start={"type": "start"}, drain_timeout_s=0.3)
            return await converse(url, [b"\0\0"], options)

    with pytest.raises(ClientError) as failure:
        run(scenario())
    assert failure.value.code == "timeout"


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("http://127.0.0.1:9/ws", "bad_url"),
        ("ws://[::1/ws", "bad_url"),
        ("ws://127.0.0.1:9/ws", "connection"),
    ],
)
def test_no_session_at_all_is_a_typed_error(url: str, code: str) -> None:
    with pytest.raises(ClientError) as failure:
        run(converse(url, [], SessionOptions()))
    assert failure.value.code == code


def test_run_session_announces_a_replay_only_when_faster_than_live() -> None:
    starts: list[Any] = []

    async def record(ws: ServerConnection) -> None:
        starts.append(json.loads(await ws.recv()))
        await ws.close(1000)

    async def scenario(speed: float, start: dict[str, Any] | None) -> Outcome:
        async with fake_server(record) as url:
            return await run_session(url, b"\0\0" * 320, speed=speed, start=start)

    run(scenario(0.0, None))
    run(scenario(1.0, {"type": "start", "language": "en"}))
    run(scenario(4.0, {"type": "start", "language": "en"}))
    assert starts == [
        {"type": "start", "pace": "replay"},
        {"type": "start", "language": "en"},
        {"type": "start", "language": "en", "pace": "replay"},
    ]
    assert (pace_for(0), pace_for(1.0), pace_for(1.5), pace_for(2.0)) == (
        "replay",
        "live",
        "live",
        "replay",
    )
