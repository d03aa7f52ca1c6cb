"""A small protocol-v1 test client."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed


@dataclass
class Outcome:
    events: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    close_code: int | None = None
    audio_done_at: float = 0.0

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]


async def run_session(
    url: str,
    audio: bytes,
    *,
    start: dict[str, Any] | None = None,
    chunk: int = 3200,
    speed: float = 0.0,
    stop: bool = True,
    extra: list[bytes | str] | None = None,
) -> Outcome:
    """Stream s16le audio (at `speed` x real time; 0 = flat out) and collect every event."""
    outcome = Outcome()
    async with connect(url, compression=None, max_size=1 << 22) as ws:
        if start is not None:
            await ws.send(json.dumps(start))

        async def send() -> None:
            t0 = time.monotonic()
            for i, at in enumerate(range(0, len(audio), chunk)):
                if speed > 0:
                    due = t0 + i * chunk / 32000 / speed
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                await ws.send(audio[at : at + chunk])
            for message in extra or []:
                await ws.send(message)
            outcome.audio_done_at = time.monotonic()
            if stop:
                await ws.send(json.dumps({"type": "stop"}))

        sender = asyncio.create_task(send())
        try:
            async for message in ws:
                outcome.events.append(json.loads(message))
                outcome.times.append(time.monotonic())
        except ConnectionClosed:
            pass
        outcome.close_code = ws.close_code
        if not sender.done():
            sender.cancel()
    return outcome
