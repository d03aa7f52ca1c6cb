"""Webhooks: signed, ordered, retried when the receiver fails, bounded when it lags."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from engine.types import Transcript
from server.streams.hub import Publisher, StreamHub
from server.streams.webhooks import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    PendingBodies,
    WebhookDelivery,
    WebhookPolicy,
    Webhooks,
)
from streaming.audio.decoder import AudioFormat
from streaming.commands import StreamOptions
from streaming.events import Configured, ErrorEvent, Final

SECRET = b"webhook-secret-0123456789"


@dataclass
class Receiver:
    """A real HTTP receiver that answers each POST with the next planned status."""

    plan: list[int] = field(default_factory=list)  # statuses to answer first; then 200
    bodies: list[dict[str, Any]] = field(default_factory=list)
    signed: list[tuple[str, str, bytes]] = field(default_factory=list)  # timestamp, sig, body
    attempts: int = 0
    gate: asyncio.Event | None = None  # when set, requests wait for it
    got_end: asyncio.Event = field(default_factory=asyncio.Event)  # a stream's `end` came

    async def handle(self, request: web.Request) -> web.Response:
        self.attempts += 1
        if self.gate is not None:
            await self.gate.wait()
        body = await request.read()
        self.signed.append(
            (request.headers[TIMESTAMP_HEADER], request.headers[SIGNATURE_HEADER], body)
        )
        status = self.plan.pop(0) if self.plan else 200
        if status == 200:
            self.bodies.append(json.loads(body))
            if self.bodies[-1].get("event", {}).get("type") == "end":
                self.got_end.set()
        return web.Response(status=status)


@asynccontextmanager
async def receiving(receiver: Receiver, port: int = 0) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/hook"
    finally:
        await runner.cleanup()


def policy(**overrides: Any) -> WebhookPolicy:
    return WebhookPolicy(("http://127.0.0.1/",), SECRET, **{"first_backoff_s": 0.01, **overrides})


async def deliver(
    receiver: Receiver, events: list[dict[str, Any]], pol: WebhookPolicy
) -> dict[str, int]:
    counts: dict[str, int] = {}

    def count(outcome: str) -> None:
        counts[outcome] = counts.get(outcome, 0) + 1

    async with receiving(receiver) as url, aiohttp.ClientSession() as http:
        delivery = WebhookDelivery(url, pol, http, count)
        for event in events:
            delivery.send(event)
        delivery.finish()
        if receiver.gate is not None:
            receiver.gate.set()
        await asyncio.wait_for(delivery.task, 10)
    return counts


def run(scenario: Callable[[], Any]) -> Any:
    return asyncio.run(scenario())


def documented_signature(timestamp: str, body: bytes) -> str:
    """The header docs/callcentre.md tells receivers to expect, computed here from scratch."""
    mac = hmac.new(SECRET, f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def test_events_arrive_in_order_and_signed() -> None:
    receiver = Receiver()
    events = [{"n": i} for i in range(5)]
    counts = run(lambda: deliver(receiver, events, policy()))
    assert receiver.bodies == events
    assert counts == {"delivered": 5}
    assert [json.loads(body) for _, _, body in receiver.signed] == events
    for timestamp, header, body in receiver.signed:
        assert timestamp.isdigit(), timestamp  # Unix seconds
        assert header == documented_signature(timestamp, body)


def test_a_failing_receiver_is_retried_and_a_refusing_one_is_not() -> None:
    receiver = Receiver(plan=[503, 500, 429, 400])
    counts = run(lambda: deliver(receiver, [{"n": 0}, {"n": 1}], policy()))
    # 503, 500 and 429 are retried until the fourth answer, 400, refuses the body for good.
    assert receiver.bodies == [{"n": 1}] and receiver.attempts == 5
    assert counts == {"failed": 1, "delivered": 1}


def test_an_unreachable_receiver_fails_after_its_attempts() -> None:
    async def scenario() -> dict[str, int]:
        counts: dict[str, int] = {}
        async with aiohttp.ClientSession() as http:
            # A port nothing listens on: every attempt is refused at once.
            delivery = WebhookDelivery(
                "http://127.0.0.1:9/hook",
                policy(attempts=3),
                http,
                lambda o: counts.__setitem__(o, counts.get(o, 0) + 1),
            )
            delivery.send({"n": 0})
            delivery.finish()
            await asyncio.wait_for(delivery.task, 10)
        return counts

    assert run(scenario) == {"failed": 1}


def test_a_lagging_receiver_costs_events_past_the_bound_never_waiting() -> None:
    receiver = Receiver(gate=asyncio.Event())
    events = [{"n": i} for i in range(6)]
    counts = run(lambda: deliver(receiver, events, policy(max_pending=3)))
    # All six were queued at once, before the first POST could start: three fit.
    assert counts == {"dropped": 3, "delivered": 3}
    assert receiver.bodies == events[:3]


def test_the_policy_allows_only_urls_under_its_prefixes() -> None:
    pol = WebhookPolicy(("https://hooks.example.com/calls/",), SECRET)
    assert pol.allows("https://hooks.example.com/calls/0042?x=1")
    assert pol.allows("https://HOOKS.example.com:443/calls/a")
    for url in (
        "https://hooks.example.com.evil.net/calls/",  # another host
        "https://hooks.example.com@169.254.169.254/calls/",  # user info
        "https://hooks.example.com/calls/../admin",  # a dot segment
        "https://hooks.example.com/calls/%2e%2e/admin",  # an encoded one
        "https://hooks.example.com\\@evil.net/calls/",  # a backslash
        "https://hooks.example.com:8443/calls/",  # another port
        "http://hooks.example.com/calls/",  # another scheme
        "https://hooks.example.com/callsX",  # beside the prefix, not under it
        "http://169.254.169.254/latest",
        "https://hooks.example.com:99999/calls/",  # no such port
    ):
        assert not pol.allows(url), url


def test_a_prefix_admits_whole_path_segments_only() -> None:
    for prefix in ("https://hooks.example/tenant1", "https://hooks.example/tenant1/"):
        pol = WebhookPolicy((prefix,), SECRET)
        for url in (
            "https://hooks.example/tenant1",
            "https://hooks.example/tenant1/",
            "https://hooks.example/tenant1/calls/hook?id=7",
            "https://hooks.example/tenant1/a%20b",  # an encoded space is only a space
        ):
            assert pol.allows(url), (prefix, url)
        for url in (
            "https://hooks.example/tenant10/steal",  # a longer segment, not a child
            "https://hooks.example/tenant1x",
            "https://hooks.example/tenant",
            "https://hooks.example/",
        ):
            assert not pol.allows(url), (prefix, url)


def test_a_path_that_could_step_out_of_its_prefix_is_refused() -> None:
    pol = WebhookPolicy(("https://hooks.example/tenant1/",), SECRET)
    for url in (
        "https://hooks.example/tenant1/../tenant2/hook",
        "https://hooks.example/tenant1/./../tenant2",
        "https://hooks.example/tenant1/%2e%2e/tenant2",
        "https://hooks.example/tenant1/%2E%2E/tenant2",
        "https://hooks.example/tenant1/.%2e/tenant2",
        "https://hooks.example/tenant1/%252e%252e/tenant2",  # decoded twice by some
        "https://hooks.example/tenant1%2f..%2ftenant2",  # an encoded slash
        "https://hooks.example/tenant1/..%2ftenant2",
        "https://hooks.example/tenant1/..%5ctenant2",  # an encoded backslash
        "https://hooks.example/tenant1/..;/tenant2",  # a dot segment with ;params
        "https://hooks.example/tenant1/..",
    ):
        assert not pol.allows(url), url


def test_close_lets_queued_events_go_out() -> None:
    async def scenario() -> list[dict[str, Any]]:
        receiver = Receiver()
        async with receiving(receiver) as url:
            hooks = Webhooks(policy(), lambda outcome: None)
            delivery = hooks.open(url)
            delivery.send({"n": 0})
            await hooks.close(timeout_s=5)
        return receiver.bodies

    assert run(scenario) == [{"n": 0}]


def test_after_its_stream_ends_a_webhook_gives_up_at_the_drain_deadline() -> None:
    receiver = Receiver(gate=asyncio.Event())  # a receiver that never answers

    async def scenario() -> dict[str, int]:
        counts: dict[str, int] = {}
        async with receiving(receiver) as url, aiohttp.ClientSession() as http:
            delivery = WebhookDelivery(
                url,
                policy(drain_s=0.3),
                http,
                lambda o: counts.__setitem__(o, counts.get(o, 0) + 1),
            )
            for n in range(3):
                delivery.send({"n": n})
            delivery.finish()
            await asyncio.gather(delivery.task, return_exceptions=True)
            receiver.gate.set()  # type: ignore[union-attr]
        return counts

    # The one in flight and the two queued behind it: all failed, nothing kept.
    assert run(scenario) == {"failed": 3}


def test_every_streams_webhook_shares_one_bound() -> None:
    async def scenario() -> dict[str, int]:
        counts: dict[str, int] = {}
        shared = PendingBodies(3)
        receiver = Receiver()
        async with receiving(receiver) as url, aiohttp.ClientSession() as http:
            count = lambda o: counts.__setitem__(o, counts.get(o, 0) + 1)  # noqa: E731
            first = WebhookDelivery(url, policy(), http, count, shared)
            second = WebhookDelivery(url, policy(), http, count, shared)
            for n in range(2):
                first.send({"n": n})
                second.send({"n": n})
            for delivery in (first, second):
                delivery.finish()
            await asyncio.gather(first.task, second.task)
        assert shared.count == 0  # every body given back
        return counts

    assert run(scenario) == {"delivered": 3, "dropped": 1}


def test_a_stream_lost_midway_tells_its_webhook_why_and_ends() -> None:
    async def scenario() -> list[str]:
        receiver = Receiver()
        async with receiving(receiver) as url:
            allow = url.rsplit("/", 1)[0] + "/"
            hooks = Webhooks(WebhookPolicy((allow,), SECRET), lambda outcome: None)
            hub = StreamHub()
            publisher = Publisher(hub, "s1", "v1", 0.0, hooks)
            fmt = AudioFormat("mulaw", 8000, 1)
            configured = Configured("s1", fmt, StreamOptions(), "m", True, webhook_url=url)
            assert publisher.event(configured) is None
            text = Transcript("hi", "en", "neutral", "speech", True, "hi")
            publisher.event(Final(0, 0, 500, text))
            publisher.close(ErrorEvent("session_closed", "the client went away"))
            await hooks.close(timeout_s=5)
        return [b["event"]["type"] for b in receiver.bodies]

    assert run(scenario) == ["final", "error", "end"]
