"""Subscribers on a real server: /v1/streams and /v1/streams/{id}/events, with v1 multichannel."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.error import HTTPError

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from sensestream.client import multichannel_start
from tests.callcentre.call import LABELS, RATE, Call, make_call
from tests.callcentre.subscriber import Followed, follow, follow_url
from tests.server.conftest import ServerProcess, followable
from tests.server.test_webhooks import Receiver, documented_signature, receiving
from tests.speech import chunks

KEY = "subscriber-test-key-0123456789"
SECRET = b"webhook-secret-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, hook_port: int, workers: str) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tiny_model_dir,
        "--workers",
        workers,
        "--api-keys",
        KEY,
        "--webhook-allow",
        f"http://127.0.0.1:{hook_port}/",
        "--webhook-secret",
        SECRET.decode(),
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def call(tmp_path_factory: pytest.TempPathFactory) -> Call:
    return make_call(tmp_path_factory.mktemp("call"))


def start(stream_id: str, **extra: Any) -> str:
    return json.dumps(multichannel_start(stream_id, LABELS, RATE) | {"pace": "replay"} | extra)


async def read_all(ws: ClientConnection) -> list[dict[str, Any]]:
    """Every message until the server closes, whatever its close code."""
    seen = []
    with contextlib.suppress(ConnectionClosed):
        async for message in ws:
            seen.append(json.loads(message))
    return seen


async def read_until(ws: ClientConnection, kind: str) -> list[dict[str, Any]]:
    seen = []
    while not seen or seen[-1]["type"] != kind:
        seen.append(json.loads(await ws.recv()))
    return seen


def http_get(url: str, headers: dict[str, str]) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except HTTPError as exc:
        return exc.code, None


def run(scenario: Any) -> Any:
    return asyncio.run(asyncio.wait_for(scenario, TIMEOUT_S))


def test_a_subscriber_gets_the_callers_events_with_channels_and_labels(
    server: ServerProcess, call: Call
) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], Followed]:
        follower = asyncio.create_task(follow(server.url, "call-1", AUTH))
        async with connect(server.url, additional_headers=AUTH) as ws:
            await ws.send(start("call-1"))
            for frame in chunks(call.stereo(), 1600):  # 100 ms of stereo μ-law
                await ws.send(frame)
            await ws.send(json.dumps({"type": "stop"}))
            caller = await read_all(ws)
        return caller, await follower

    caller, followed = run(scenario())
    ready = caller[0]
    assert ready["type"] == "ready" and ready["config"]["stream_id"] == "call-1"
    assert ready["config"]["multichannel"] and ready["config"]["channel_labels"] == list(LABELS)
    finals = [e for e in caller if e["type"] == "final"]
    assert {f["channel"] for f in finals} == {0, 1}
    assert all(f["label"] == LABELS[f["channel"]] for f in finals)
    # Scored by default: the confidences go to followers with the rest.
    assert all(0 < f["confidence"] <= 1 for f in finals if f["words"])
    # The follower joined before the stream started: it saw everything the caller saw.
    assert followed.events == followable(caller) and followed.close_code == 1000


def test_a_late_subscriber_gets_the_missed_finals_first(server: ServerProcess, call: Call) -> None:
    stereo = call.stereo()
    half = len(stereo) // 2 // 1600 * 1600

    async def scenario() -> tuple[list[dict[str, Any]], Followed, dict[str, Any]]:
        async with connect(server.url, additional_headers=AUTH) as ws:
            await ws.send(start("call-late"))
            for frame in chunks(stereo[:half], 1600):
                await ws.send(frame)
            caller = await read_until(ws, "final")  # at least one final has gone out
            listed = await asyncio.to_thread(http_get, server.server.http_url + "/v1/streams", AUTH)
            follower = asyncio.create_task(follow(server.url, "call-late", AUTH))
            for frame in chunks(stereo[half:], 1600):
                await ws.send(frame)
            await ws.send(json.dumps({"type": "stop"}))
            caller += await read_all(ws)
        return caller, await follower, listed[1]

    caller, followed, listed = run(scenario())
    (stream,) = [s for s in listed["streams"] if s["stream_id"] == "call-late"]
    assert stream["channel_labels"] == list(LABELS) and stream["channels"] == 2
    assert stream["protocol"] == "v1"
    assert followed.events[0]["type"] == "ready"
    assert followed.of("final") == [e for e in caller if e["type"] == "final"]
    assert followed.events[-1]["type"] == "end"


def test_streams_and_followers_need_the_key(server: ServerProcess) -> None:
    status, _ = http_get(server.server.http_url + "/v1/streams", {})
    assert status == 401
    status, listing = http_get(server.server.http_url + "/v1/streams", AUTH)
    assert status == 200 and isinstance(listing["streams"], list)

    async def refused(headers: dict[str, str], wait_s: float) -> int:
        with pytest.raises(InvalidStatus) as info:
            async with connect(
                follow_url(server.url, "nobody", wait_s), additional_headers=headers
            ):
                pass
        return info.value.response.status_code

    assert run(refused({}, 0)) == 401
    assert run(refused(AUTH, 0)) == 404
    assert run(refused(AUTH, 0.3)) == 404  # waited for a stream that never started


def test_a_taken_stream_id_is_refused_and_the_first_stream_goes_on(
    server: ServerProcess, call: Call
) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], int | None]:
        async with connect(server.url, additional_headers=AUTH) as first:
            await first.send(start("call-twice"))
            await read_until(first, "ready")
            async with connect(server.url, additional_headers=AUTH) as second:
                await second.send(start("call-twice"))
                refused = await read_all(second)
                code = second.close_code
            for frame in chunks(call.stereo(), 1600):
                await first.send(frame)
            await first.send(json.dumps({"type": "stop"}))
            return refused, await read_all(first), code

    refused, first, code = run(scenario())
    assert [e["type"] for e in refused][-2:] == ["error", "end"]
    assert refused[-2]["code"] == "stream_id_taken" and code == 1008
    assert first[-1]["type"] == "end" and any(e["type"] == "final" for e in first)


def test_a_caller_that_vanishes_ends_its_followers_with_an_error(
    server: ServerProcess, call: Call
) -> None:
    async def scenario() -> Followed:
        joined = asyncio.Event()
        follower = asyncio.create_task(follow(server.url, "call-gone", AUTH, joined=joined))
        async with connect(server.url, additional_headers=AUTH) as ws:
            await ws.send(start("call-gone"))
            await read_until(ws, "ready")
            # On a busy host the follower's handshake may come late: a stream that ended
            # before it arrived would be a 404, not the error this test is about.
            await asyncio.wait_for(joined.wait(), 30)
            await ws.send(call.stereo()[: 2 * RATE])
        # Closed without stop: the caller is gone.
        return await follower

    followed = run(scenario())
    assert [e["type"] for e in followed.events][-2:] == ["error", "end"]
    assert followed.events[-2]["code"] == "session_closed"


def test_a_streams_finals_and_end_are_posted_to_its_webhook(
    server: ServerProcess, call: Call, hook_port: int
) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
        receiver = Receiver()
        follower = asyncio.create_task(follow(server.url, "call-hook", AUTH))
        async with receiving(receiver, hook_port) as hook:
            async with connect(server.url, additional_headers=AUTH) as ws:
                await ws.send(start("call-hook", webhook_url=hook))
                for frame in chunks(call.stereo(), 1600):
                    await ws.send(frame)
                await ws.send(json.dumps({"type": "stop"}))
                caller = await read_all(ws)
            # The end is the last event posted: once it is in, everything is.
            await asyncio.wait_for(receiver.got_end.wait(), 30)
        followed = await follower
        # The caller named its webhook; followers are not told where it is.
        assert caller[0]["config"]["webhook_url"] == hook
        assert followed.events[0]["config"]["webhook_url"] is None
        signed = bool(receiver.signed) and all(
            header == documented_signature(timestamp, body)
            for timestamp, header, body in receiver.signed
        )
        return caller, receiver.bodies, signed

    caller, bodies, signed = run(scenario())
    assert signed and {b["stream_id"] for b in bodies} == {"call-hook"}
    posted = [b["event"] for b in bodies]
    assert posted == [e for e in caller if e["type"] in ("final", "end")]
    assert any("confidence" in e for e in posted)  # the scores are posted too


def test_a_webhook_outside_the_allowed_prefixes_is_refused(server: ServerProcess) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], int | None]:
        async with connect(server.url, additional_headers=AUTH) as ws:
            await ws.send(start("call-evil", webhook_url="http://169.254.169.254/latest"))
            return await read_all(ws), ws.close_code

    events, code = run(scenario())
    assert [e["type"] for e in events] == ["ready", "error", "end"]
    assert events[1]["code"] == "webhook_not_allowed" and code == 1008
