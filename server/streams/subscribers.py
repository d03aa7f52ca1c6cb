"""One subscriber's socket: a live stream's events, as protocol v1 JSON, until its end.

The subscriber only listens: what it sends is read and ignored (so its close is seen). A
subscriber that falls behind is told so and closed (1008) within a grace, else aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

from server.live.socket_port import ClientGone, SocketPort
from server.streams.hub import StreamHub, Subscription
from streaming.errors import CLOSE_NORMAL, CLOSE_POLICY_VIOLATION
from streaming.events import Configured, Ended, ErrorEvent
from streaming.limits import SessionLimits
from streaming.protocols.v1.codec import V1Codec

#: How long a dropped subscriber gets to take its error and close before an abort.
DROP_GRACE_S = 5.0
SLOW = ErrorEvent("slow_subscriber", "subscriber is not reading: dropped from the stream")


class Follower:
    """Sends one subscription's events to its socket; reads only to see the client close."""

    def __init__(self, port: SocketPort, sub: Subscription, hub: StreamHub) -> None:
        self._port = port
        self._sub = sub
        self._hub = hub
        self._codec = V1Codec(SessionLimits())  # encodes events with channel labels

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self._write(), name="follow-write"),
            asyncio.create_task(self._read(), name="follow-read"),
            asyncio.create_task(self._sub.dropped.wait(), name="follow-dropped"),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if tasks[2] in done and not tasks[0].done():
                tasks[0].cancel()
                await self._drop()
        finally:
            self._hub.unsubscribe(self._sub)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _write(self) -> None:
        try:
            while True:
                event = await self._sub.outbox.get()
                if isinstance(event, Configured):  # the webhook URL may carry its secret
                    event = replace(event, webhook_url=None)
                for frame in self._codec.encode(event):
                    await self._port.send(frame)
                if isinstance(event, Ended):
                    await self._port.close(CLOSE_NORMAL)
                    return
        except ClientGone:
            return

    async def _read(self) -> None:
        with contextlib.suppress(ClientGone):
            while True:
                await self._port.recv()

    async def _drop(self) -> None:
        try:
            async with asyncio.timeout(DROP_GRACE_S):
                for frame in self._codec.encode(SLOW):
                    await self._port.send(frame)
                await self._port.close(CLOSE_POLICY_VIOLATION, SLOW.code)
        except (TimeoutError, ClientGone):
            self._port.abort()
