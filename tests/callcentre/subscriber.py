"""A follower of a live stream, as an agent-assist screen would be: every event until close."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed


@dataclass
class Followed:
    """What one subscriber saw (arrival times from time.monotonic())."""

    events: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    close_code: int | None = None

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]


def follow_url(ws_url: str, stream_id: str, wait_s: float = 10.0) -> str:
    """The subscriber URL on the server of `ws_url` (any stream path of it)."""
    base = ws_url.split("/", 3)[:3]
    return "/".join(base) + f"/v1/streams/{quote(stream_id, safe='')}/events?wait={wait_s:g}"


async def follow(
    ws_url: str,
    stream_id: str,
    headers: dict[str, str] | None = None,
    wait_s: float = 10.0,
    joined: asyncio.Event | None = None,
) -> Followed:
    """Follow `stream_id` (waiting for it to start) until the server closes; `joined` is
    set at the first event (the follower is on the stream)."""
    seen = Followed()
    async with connect(
        follow_url(ws_url, stream_id, wait_s),
        additional_headers=headers or {},
        open_timeout=wait_s + 10,
    ) as ws:
        try:
            async for message in ws:
                seen.events.append(json.loads(message))
                seen.times.append(time.monotonic())
                if joined is not None:
                    joined.set()
        except ConnectionClosed:
            pass
        seen.close_code = ws.close_code
    return seen
