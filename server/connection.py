"""One WebSocket client: move bytes between the socket, its Session and the engine.

Three tasks share the session on the event loop (so no locks): the reader feeds client
frames in, the results task feeds engine answers in, and the writer sends events out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from engine.async_engine import AsyncEngine
from engine.types import InferenceResult
from server.outbox import Outbox, OutboxOverflowError
from streaming.errors import (
    CLOSE_GOING_AWAY,
    CLOSE_NORMAL,
    CLOSE_POLICY_VIOLATION,
    ProtocolError,
    SessionLimitError,
)
from streaming.messages import End, ErrorEvent, dump_event
from streaming.session import Session

log = logging.getLogger("sensestream.connection")

#: How long a client that stopped reading gets to take its error and close frames before
#: the connection is dropped: otherwise both ends could wait on each other's full buffers.
SLOW_CLIENT_GRACE_S = 5.0


class ConnectionStats(Protocol):
    """Where a connection reports what happened (the app's metrics)."""

    def protocol_error(self, code: str) -> None: ...


class Connection:
    """Runs one client's session until `end` is sent or the client goes away."""

    def __init__(
        self,
        ws: ServerConnection,
        session: Session,
        engine: AsyncEngine,
        stats: ConnectionStats,
        *,
        max_pending_events: int = 256,
        idle_timeout_s: float = 30.0,
    ) -> None:
        self.ws = ws
        self.session = session
        self.engine = engine
        self._stats = stats
        self._loop = asyncio.get_running_loop()
        self._channel = engine.open_session(session.session_id)
        self._outbox = Outbox(max_pending_events)
        self._idle_timeout_s = idle_timeout_s
        self._going_away = False
        self._done = asyncio.Event()
        self._dropping: asyncio.Task[None] | None = None  # set once the client is too slow

    async def run(self) -> None:
        """Serve until the session ends or the client disconnects; always clean up."""
        tasks = [
            asyncio.create_task(self._read(), name="read"),
            asyncio.create_task(self._results(), name="results"),
            asyncio.create_task(self._write(), name="write"),
        ]
        self._pump()  # a session may already owe a `ready`
        try:
            # The writer ends after `end`; the reader ends early if the client goes away.
            await asyncio.wait([tasks[0], tasks[2]], return_when=asyncio.FIRST_COMPLETED)
            if not tasks[2].done() and not self._client_gone(tasks[0]):
                await tasks[2]
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.engine.cancel(self.session.session_id)
            self._done.set()

    async def drain(self) -> None:
        """Graceful shutdown: finish the utterance in flight, send owed finals, close 1001."""
        self._going_away = True
        with contextlib.suppress(ProtocolError):
            self.session.end_of_stream(self._loop.time())
        self._pump()
        await self._done.wait()

    def _client_gone(self, reader: asyncio.Task[None]) -> bool:
        return reader.done() and self.ws.state in (State.CLOSING, State.CLOSED)

    async def _read(self) -> None:
        while True:
            # Idle clients are timed out; once stopped, the client only waits for finals.
            timeout = None if self.session.stopped else self._idle_timeout_s
            try:
                message = await asyncio.wait_for(self.ws.recv(), timeout)
            except TimeoutError:
                self._fail(SessionLimitError(f"no audio for {timeout:.0f} s"))
                return
            except ConnectionClosed:
                return
            if self._going_away:
                continue  # the server decided to stop: later audio is dropped, not an error
            now = self._loop.time()
            try:
                if isinstance(message, bytes):
                    self.session.receive_audio(message, now)
                else:
                    self.session.receive_text(message, now)
            except ProtocolError as exc:
                self._fail(exc)
                return
            self._pump()

    def _fail(self, exc: ProtocolError) -> None:
        """Report a client error; the session still delivers the finals it owes."""
        self._stats.protocol_error(exc.code)
        log.info("session %s: %s: %s", self.session.session_id, exc.code, exc)
        self.session.abort(exc, self._loop.time())
        self._pump()

    async def _results(self) -> None:
        while True:
            result: InferenceResult = await self._channel.get()
            self.session.receive_result(result, self._loop.time())
            self._pump()

    async def _write(self) -> None:
        try:
            while True:
                event = await self._outbox.get()
                await self.ws.send(dump_event(event))
                if isinstance(event, End):
                    await self.ws.close(self._close_code(), "end of stream")
                    return
        except ConnectionClosed:
            return

    def _close_code(self) -> int:
        if self.session.close_code is not None:
            return self.session.close_code
        return CLOSE_GOING_AWAY if self._going_away else CLOSE_NORMAL

    def _pump(self) -> None:
        """Hand the session's new requests to the engine and its events to the outbox."""
        if self._dropping is not None:
            return  # the session is being dropped: nothing more is decoded or queued
        for request in self.session.requests_to_submit():
            self.engine.submit(request)
        try:
            for event in self.session.events_to_send():
                self._outbox.put(event)
        except OutboxOverflowError as exc:
            self._stats.protocol_error(exc.code)
            self._close_slow_client(str(exc))

    def _close_slow_client(self, message: str) -> None:
        log.warning("session %s: %s", self.session.session_id, message)
        self.engine.cancel(self.session.session_id)
        self._dropping = self._loop.create_task(self._drop(message), name="drop")

    async def _drop(self, message: str) -> None:
        """Say why and close 1008 if the client takes it in time; else abort the socket."""
        try:
            async with asyncio.timeout(SLOW_CLIENT_GRACE_S):
                await self.ws.send(dump_event(ErrorEvent("slow_client", message)))
                await self.ws.close(CLOSE_POLICY_VIOLATION, "slow client")
        except (TimeoutError, ConnectionClosed):
            self.ws.transport.abort()
