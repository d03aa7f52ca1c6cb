"""A per-client outbox that coalesces partials: when a client lags, newer replaces older.

Finals, errors and control events always queue, up to a bound; past it the client is too
slow to serve and the connection is closed with a clear error.
"""

from __future__ import annotations

import asyncio
from collections import deque

from streaming.events import Failed, Final, Partial, SessionEvent


def same_utterance(a: Partial, b: Partial | Final | Failed) -> bool:
    return a.utt_id == b.utt_id and a.channel == b.channel


class OutboxOverflowError(Exception):
    """The client stopped reading while finals kept coming."""

    code = "slow_client"


class Outbox:
    """Events waiting for one client's socket."""

    def __init__(self, max_pending: int = 256) -> None:
        self._events: deque[SessionEvent] = deque()
        self._ready = asyncio.Event()
        self._max_pending = max_pending
        self.partials_dropped = 0

    def put(self, event: SessionEvent) -> None:
        """Queue an event; a partial replaces an unsent partial of the same utterance."""
        if isinstance(event, Partial | Final | Failed):
            for i, queued in enumerate(self._events):
                if isinstance(queued, Partial) and same_utterance(queued, event):
                    del self._events[i]
                    self.partials_dropped += 1
                    break
        if len(self._events) >= self._max_pending:
            raise OutboxOverflowError(
                f"client is not reading: {len(self._events)} events are waiting to be sent"
            )
        self._events.append(event)
        self._ready.set()

    async def get(self) -> SessionEvent:
        """The next event, waiting for one if none is queued."""
        while not self._events:
            self._ready.clear()
            await self._ready.wait()
        return self._events.popleft()

    def take_nowait(self) -> SessionEvent | None:
        """The next event if one is queued (a stream handed over empties its outbox)."""
        return self._events.popleft() if self._events else None

    def __len__(self) -> int:
        return len(self._events)
