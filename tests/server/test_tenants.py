"""Tenants on a real server: each key's streams are its own to list, follow and name.

Four keys from a key file: two plain keys (a tenant each, named after a hash of the key),
a named tenant (acme) and an admin (ops). A stream belongs to the key that started it; its
id is unique only within that tenant, so another tenant cannot block a telephony call by
claiming its Twilio callSid or AudioHook conversation id first, nor list or follow it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.callcentre.audiohook_emulator import AudioHookCall, play
from tests.callcentre.subscriber import follow, follow_url
from tests.callcentre.twilio_emulator import TwilioCall, play_call
from tests.server.conftest import ServerProcess
from tests.streaming.fakes import tone_bursts
from tools.g711 import encode_mulaw

ALPHA = "alpha-key-0123456789abcdef"
BETA = "beta-key-0123456789abcdef"
ACME = "acme-key-0123456789abcdef"
OPS = "ops-key-0123456789abcdef"
CONVERSATION = "5b1c7a4e-2f3d-4e5f-9a0b-1c2d3e4f5a6b"
TIMEOUT_S = 120.0


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    keys = tmp_path_factory.mktemp("keys") / "keys"
    keys.write_text(
        f"{ALPHA}\n{BETA}  # a competitor\nacme:{ACME}\nops:{OPS}:admin\n",
        encoding="utf-8",
    )
    proc = ServerProcess(tiny_model_dir, "--api-keys-file", str(keys))
    yield proc
    proc.stop()


def listed(server: ServerProcess, key: str) -> list[dict[str, Any]]:
    request = urllib.request.Request(server.server.http_url + "/v1/streams", headers=auth(key))
    with urllib.request.urlopen(request, timeout=10) as answer:
        streams: list[dict[str, Any]] = json.loads(answer.read())["streams"]
    return streams


def run(scenario: Any) -> Any:
    return asyncio.run(asyncio.wait_for(scenario, TIMEOUT_S))


@contextlib.asynccontextmanager
async def live(server: ServerProcess, key: str, stream_id: str) -> AsyncIterator[ClientConnection]:
    """A v1 stream named `stream_id` started with `key`, live until the block ends."""
    async with connect(server.url, additional_headers=auth(key)) as ws:
        await ws.send(json.dumps({"type": "start", "stream_id": stream_id}))
        assert json.loads(await ws.recv())["type"] == "ready"
        yield ws


async def finish(ws: ClientConnection) -> tuple[list[dict[str, Any]], int | None]:
    """Stop the stream: every event until the server closes, and the close code."""
    await ws.send(json.dumps({"type": "stop"}))
    seen = []
    with contextlib.suppress(ConnectionClosed):
        async for message in ws:
            seen.append(json.loads(message))
    return seen, ws.close_code


async def follow_status(server: ServerProcess, key: str, stream_id: str, query: str = "") -> int:
    """The answer to a follower's handshake (101 when it was let in)."""
    url = follow_url(server.url, stream_id, 0) + query
    try:
        async with connect(url, additional_headers=auth(key)):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


def test_two_tenants_may_use_the_same_stream_id(server: ServerProcess) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], int | None]:
        # The first is live all along: the second's id is taken within alpha, not beta.
        async with live(server, ALPHA, "shared-1"), live(server, BETA, "shared-1") as second:
            return await finish(second)

    events, code = run(scenario())
    assert [e["type"] for e in events] == ["end"] and code == 1000


def test_a_key_lists_and_follows_only_its_own_streams(server: ServerProcess) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[int]]:
        async with live(server, ALPHA, "private-1"):
            return (
                await asyncio.to_thread(listed, server, ALPHA),
                await asyncio.to_thread(listed, server, BETA),
                [
                    await follow_status(server, ALPHA, "private-1"),
                    await follow_status(server, BETA, "private-1"),
                ],
            )

    own, other, follows = run(scenario())
    assert [s["stream_id"] for s in other] == []  # beta does not see alpha's stream
    assert follows == [101, 404]  # nor can it follow it
    (stream,) = own
    assert stream["stream_id"] == "private-1" and stream["tenant"].startswith("key-")


def test_an_admin_key_lists_every_tenant_and_follows_by_tenant_name(
    server: ServerProcess,
) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[int]]:
        async with live(server, ACME, "named-1"):
            return (
                await asyncio.to_thread(listed, server, ACME),
                await asyncio.to_thread(listed, server, OPS),
                [
                    await follow_status(server, ACME, "named-1"),
                    await follow_status(server, OPS, "named-1", "&tenant=acme"),
                    await follow_status(server, OPS, "named-1"),  # its own tenant has none
                    await follow_status(server, ALPHA, "named-1", "&tenant=acme"),
                ],
            )

    mine, everyone, follows = run(scenario())
    assert [(s["tenant"], s["stream_id"]) for s in mine] == [("acme", "named-1")]
    assert ("acme", "named-1") in [(s["tenant"], s["stream_id"]) for s in everyone]
    assert follows == [101, 101, 404, 403]


def two_party_mulaw(seconds: float) -> tuple[bytes, bytes]:
    caller = encode_mulaw(tone_bursts([(0.2, 0.8)], seconds, rate=8000))
    callee = encode_mulaw(tone_bursts([(1.0, 1.6)], seconds, rate=8000))
    return caller, callee


def test_a_twilio_call_sid_another_tenant_claimed_first_does_not_block_the_call(
    server: ServerProcess,
) -> None:
    caller, callee = two_party_mulaw(2.0)
    call = TwilioCall(caller, callee, parameters={"pace": "replay", "api_key": ALPHA})
    twilio_url = server.url.removesuffix("/ws") + "/twilio"

    async def scenario() -> tuple[Any, Any]:
        async with live(server, BETA, call.call_sid):  # the squatter is live first
            follower = asyncio.create_task(follow(server.url, call.call_sid, auth(ALPHA)))
            played = await play_call(twilio_url, call, speed=math.inf, shuffle_frames=0)
            return played, await follower

    played, followed = run(scenario())
    assert played.close_code == 1000 and not played.closed_early
    # The call's tenant's follower got the call (both tracks), not the squatter's mono stream.
    assert followed.events[0]["config"]["channel_labels"] == ["inbound", "outbound"]
    assert followed.events[-1]["type"] == "end"


def test_an_audiohook_conversation_another_tenant_claimed_first_is_still_taken(
    server: ServerProcess,
) -> None:
    caller, callee = two_party_mulaw(1.0)
    stereo = np.stack([np.frombuffer(caller, np.uint8), np.frombuffer(callee, np.uint8)], axis=1)
    script = AudioHookCall(
        stereo.tobytes(), CONVERSATION, channels=("internal", "external"), speed=20.0, api_key=ALPHA
    )

    async def scenario() -> Any:
        async with live(server, BETA, CONVERSATION):
            return await play(server.url.removesuffix("/ws") + "/audiohook", script)

    call = run(scenario())
    assert call.of("disconnect") == [] and call.of("closed") and call.problems == []
