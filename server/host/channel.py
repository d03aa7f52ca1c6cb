"""Calls and notices both ways on one local stream connection (supervisor ⇄ worker).

Each end may call the other (a request answered by a reply of the same call id) or send a
notice (no answer; notices are handled in the order they arrive, which is what keeps a
relayed stream's events in order). Frames are `engine.remote.unix`'s: a length and a
pickle, acceptable only because both ends are our own processes and the socket is 0600.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import pickle
from dataclasses import dataclass
from typing import Protocol

from engine.remote.unix import encode, read_frame

log = logging.getLogger("sensestream.host")

#: Seconds a call may go unanswered: every answer is local bookkeeping, or a gather that
#: is itself bounded by this deadline per process.
CALL_DEADLINE_S = 10.0


class ChannelClosedError(ConnectionError):
    """The other end went away (or never answered) before replying."""


@dataclass(frozen=True, slots=True)
class Request:
    call_id: int
    body: object


@dataclass(frozen=True, slots=True)
class Reply:
    call_id: int
    value: object = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Notice:
    body: object


class Handler(Protocol):
    """What one end does with the other's calls and notices."""

    async def answer(self, body: object) -> object: ...

    def notice(self, body: object) -> None: ...


class Channel:
    """One connection's calls and notices; `run` reads until the other end goes away."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._handler = handler
        self._ids = itertools.count()
        self._pending: dict[int, asyncio.Future[Reply]] = {}
        self._answering: set[asyncio.Task[None]] = set()
        self.closed = False

    async def run(self) -> None:
        """Read frames until the connection ends; then fail every call still waiting."""
        try:
            while True:
                frame = await read_frame(self._reader)
                self._dispatch(frame)
        except (asyncio.IncompleteReadError, ConnectionError, pickle.UnpicklingError) as exc:
            log.debug("a host channel ended: %s", exc)
        finally:
            self._close()
            for task in list(self._answering):
                task.cancel()
            await asyncio.gather(*self._answering, return_exceptions=True)

    async def call(self, body: object, deadline_s: float = CALL_DEADLINE_S) -> object:
        """The other end's answer to `body`; `ChannelClosedError` if none comes."""
        if self.closed:
            raise ChannelClosedError("the channel is closed")
        call_id = next(self._ids)
        waiting: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = waiting
        try:
            self._writer.write(encode(Request(call_id, body)))
            async with asyncio.timeout(deadline_s):
                reply = await waiting
        except TimeoutError as exc:
            raise ChannelClosedError(f"no answer to {type(body).__name__}") from exc
        finally:
            self._pending.pop(call_id, None)
        if reply.error is not None:
            raise ChannelClosedError(f"{type(body).__name__} failed: {reply.error}")
        return reply.value

    def notify(self, body: object) -> None:
        """Send a notice (dropped if the channel is closed: its other end is gone)."""
        if not self.closed:
            self._writer.write(encode(Notice(body)))

    async def drain(self) -> None:
        """Wait while the other end is behind in reading (backpressure for relays)."""
        if not self.closed:
            with contextlib.suppress(ConnectionError):
                await self._writer.drain()

    def close(self) -> None:
        self._close()

    def _dispatch(self, frame: object) -> None:
        if isinstance(frame, Reply):
            waiting = self._pending.pop(frame.call_id, None)
            if waiting is not None and not waiting.done():
                waiting.set_result(frame)
        elif isinstance(frame, Notice):
            self._handler.notice(frame.body)
        elif isinstance(frame, Request):
            task = asyncio.ensure_future(self._answer(frame))
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)
        else:
            raise ConnectionError(f"not a host frame: {type(frame).__name__}")

    async def _answer(self, request: Request) -> None:
        try:
            reply = Reply(request.call_id, await self._handler.answer(request.body))
        # The call's boundary: the caller learns of the failure from its reply.
        except Exception as exc:  # logged with its traceback (ruff BLE allows it)
            log.error("a %s call failed", type(request.body).__name__, exc_info=exc)
            reply = Reply(request.call_id, error=f"{type(exc).__name__}: {exc}")
        if not self.closed:
            self._writer.write(encode(reply))

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for waiting in self._pending.values():
            if not waiting.done():
                waiting.set_exception(ChannelClosedError("the other end went away"))
        self._pending.clear()
        with contextlib.suppress(RuntimeError):  # the loop may already be closing
            self._writer.close()
