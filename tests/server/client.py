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
    headers: dict[str, str] | None = None,
    pace: str | None = "auto",
    linger: float = 120.0,
) -> Outcome:
    """Stream s16le audio (at `speed` x real time; 0 = flat out) and collect every event.

    With `pace="auto"` a faster-than-real-time stream announces itself as a replay (live
    clients are held to 2x with a burst). `linger` bounds the whole session.
    """
    return await asyncio.wait_for(
        _session(url, audio, start, chunk, speed, stop, extra, headers, pace), linger
    )


async def _session(
    url: str,
    audio: bytes,
    start: dict[str, Any] | None,
    chunk: int,
    speed: float,
    stop: bool,
    extra: list[bytes | str] | None,
    headers: dict[str, str] | None,
    pace: str | None,
) -> Outcome:
    outcome = Outcome()
    if pace == "auto" and (speed == 0 or speed > 1.5):
        start = {**(start or {"type": "start"}), "pace": "replay"}
    async with connect(url, compression=None, max_size=1 << 22, additional_headers=headers) as ws:
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
