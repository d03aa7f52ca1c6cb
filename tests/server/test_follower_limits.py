"""Follower limits on a real server: per address, and `?wait=` handshakes bounded apart from
the followers (in all and per address), refused with 429/503 before the upgrade."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from server.app import App
from server.config import ServerConfig, load_config
from tests.callcentre.subscriber import follow_url
from tests.server.inprocess import serving

TIMEOUT_S = 120.0


def run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(scenario, TIMEOUT_S))


async def until(condition: Callable[[], bool]) -> None:
    """Let the server (on this loop) run until `condition` holds; the timeout only guards."""
    async with asyncio.timeout(30):
        while not condition():
            await asyncio.sleep(0.01)


def waiting(app: App) -> int:
    """Handshakes parked in the hub, waiting for their stream to start."""
    return app.streams.waiting


async def caller(stack: contextlib.AsyncExitStack, url: str, stream_id: str) -> None:
    """A v1 session publishing `stream_id`, held open on `stack`."""
    ws = await stack.enter_async_context(connect(url))
    await ws.send(json.dumps({"type": "start", "stream_id": stream_id}))
    assert json.loads(await ws.recv())["type"] == "ready"


async def follow(
    stack: contextlib.AsyncExitStack,
    url: str,
    stream_id: str,
    local: str = "127.0.0.1",
    wait_s: float = 0.0,
) -> int:
    """Follow `stream_id` from `local`, held open on `stack` once accepted: 101 once the
    stream's first event came, else the HTTP status that refused the upgrade."""
    try:
        ws = await stack.enter_async_context(
            connect(follow_url(url, stream_id, wait_s), local_addr=(local, 0), open_timeout=60)
        )
    except InvalidStatus as exc:
        return exc.response.status_code
    assert json.loads(await ws.recv())["type"] == "ready"
    return 101


def test_waiting_handshakes_do_not_take_follower_slots(tiny_model_dir: Path) -> None:
    async def scenario() -> None:
        async with (
            serving(tiny_model_dir, max_followers=1) as (app, url),
            contextlib.AsyncExitStack() as stack,
        ):
            waiter = asyncio.create_task(follow(stack, url, "later", wait_s=30))
            await until(lambda: waiting(app) == 1)
            await caller(stack, url, "live")
            assert await follow(stack, url, "live") == 101  # the wait holds no slot
            await caller(stack, url, "later")
            # Its stream started, but the one follower slot is taken by now.
            assert await waiter == 503

    run(scenario())


def test_one_address_cannot_take_every_follower_slot(tiny_model_dir: Path) -> None:
    async def scenario() -> None:
        options = {"max_followers": 3, "max_followers_per_ip": 2}
        async with (
            serving(tiny_model_dir, **options) as (app, url),
            contextlib.AsyncExitStack() as stack,
        ):
            await caller(stack, url, "live")
            async with contextlib.AsyncExitStack() as first:
                assert await follow(first, url, "live") == 101
                assert await follow(stack, url, "live") == 101
                assert await follow(stack, url, "live") == 429  # this address's 2
                assert await follow(stack, url, "live", "127.0.0.2") == 101
                assert await follow(stack, url, "live", "127.0.0.3") == 503  # all 3
            await until(lambda: app.follower_slots.following == 2)
            assert await follow(stack, url, "live") == 101  # a closed one frees its slot

    run(scenario())


def test_waiting_handshakes_are_bounded_in_total_and_per_address(tiny_model_dir: Path) -> None:
    async def scenario() -> None:
        options = {"max_waiting_followers": 2, "max_waiting_followers_per_ip": 1}
        async with serving(tiny_model_dir, **options) as (app, url):
            async with contextlib.AsyncExitStack() as stack:
                first = asyncio.create_task(follow(stack, url, "later", wait_s=30))
                await until(lambda: waiting(app) == 1)
                assert await follow(stack, url, "later", wait_s=30) == 429
                second = asyncio.create_task(follow(stack, url, "later", "127.0.0.2", 30))
                await until(lambda: waiting(app) == 2)
                assert await follow(stack, url, "later", "127.0.0.3", 30) == 503
                await caller(stack, url, "live")
                # A stream that is live already is followed at once: no waiting slot needed.
                assert await follow(stack, url, "live", wait_s=30) == 101
                await caller(stack, url, "later")
                assert [await first, await second] == [101, 101]
            await until(lambda: app.follower_slots.following == 0)

    run(scenario())


@pytest.mark.parametrize(
    "option", ["max_followers_per_ip", "max_waiting_followers", "max_waiting_followers_per_ip"]
)
def test_follower_limits_are_options_of_at_least_one(option: str) -> None:
    with pytest.raises(ValueError, match=rf"{option}\b.* must be >= 1"):
        ServerConfig.from_options(**{option: 0})
    config = load_config([f"--{option.replace('_', '-')}", "5"], {})
    assert getattr(config.limits, option) == 5
