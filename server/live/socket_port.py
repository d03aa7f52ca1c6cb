"""One accepted WebSocket as the connection sees it: frames in and out, close, abort.

The ASGI server owns the socket; this adapter gives the connection the few operations it
needs and one exception for a client that has gone.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect

#: Where `TransportCapture` leaves the connection's transport in the ASGI scope.
TRANSPORT_KEY = "sensestream.transport"
#: The close reason of a stream that ended as it should (or was drained at shutdown).
END_OF_STREAM = "end of stream"
#: RFC 6455 leaves a close frame's reason 123 bytes of UTF-8.
MAX_REASON_BYTES = 123
#: A client's close codes that say it is done (RFC 6455's normal closure and going
#: away, as a browser's page that closes): anything else, no close frame above all
#: (1006), is a connection lost, which a resumable stream waits for its client after.
LEAVING_CODES = frozenset({1000, 1001})
#: How long `settle` waits for the close a failed send ran into.
SETTLE_S = 1.0


def close_reason(error: str | None) -> str:
    """A close frame's reason: the code of the error that ended the stream, else a clean end."""
    if error is None:
        return END_OF_STREAM
    reason = f"error: {error}".encode()[:MAX_REASON_BYTES]
    return reason.decode(errors="ignore")  # a cut inside a character drops that character


class ClientGone(Exception):
    """The client closed the connection, or it broke."""


class Port(Protocol):
    """What a connection needs of its client's socket: this process's WebSocket, or a
    resumed client's frames piped from the worker its resume landed on."""

    @property
    def peer(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    @property
    def left(self) -> bool:
        """The client closed the connection itself, saying it is done (not lost)."""
        ...

    async def settle(self) -> None:
        """Learn how a closed connection ended (`left`), when a failed send saw it first;
        nothing else may read meanwhile."""
        ...

    async def recv(self) -> str | bytes: ...

    async def send(self, frame: str | bytes) -> None: ...

    async def close(self, code: int, error: str | None = None) -> None: ...

    def abort(self) -> None: ...


class SocketPort:
    """A WebSocket that has been accepted."""

    def __init__(self, websocket: WebSocket) -> None:
        self._ws = websocket
        self._closed = False
        self._close_code: int | None = None  # the client's, from its close frame
        self._peeked: str | bytes | None = None  # the message `peek` saw, not yet taken
        self._ahead: asyncio.Task[str | bytes] | None = None  # a read `peek` left waiting
        self._transport: asyncio.BaseTransport | None = websocket.scope.get("extensions", {}).get(
            TRANSPORT_KEY
        )

    @property
    def peer(self) -> str:
        client = self._ws.client
        return client.host if client else "unknown"

    @property
    def closed(self) -> bool:
        """The client's close (or the connection's loss) has been seen."""
        return self._closed

    @property
    def left(self) -> bool:
        return self._close_code in LEAVING_CODES

    @property
    def close_code(self) -> int | None:
        """The client's close code (1005 or 1006: the connection was lost), once seen."""
        return self._close_code

    async def settle(self) -> None:
        if not self._closed or self._close_code is not None:
            return
        # The server queues the client's close (or the loss) as a message: read it.
        with contextlib.suppress(TimeoutError, OSError, RuntimeError, WebSocketDisconnect):
            async with asyncio.timeout(SETTLE_S):
                while (message := await self._ws.receive())["type"] != "websocket.disconnect":
                    pass  # frames the client sent before it closed: the stream has ended
                self._close_code = message.get("code")

    async def recv(self) -> str | bytes:
        """The next message; raises ClientGone once the client has closed."""
        if self._peeked is not None:
            message, self._peeked = self._peeked, None
            return message
        if self._ahead is not None:
            ahead, self._ahead = self._ahead, None
            return await ahead
        return await self._receive()

    async def peek(self, timeout_s: float) -> str | bytes | None:
        """The first message if it comes within `timeout_s` (it is read again by the next
        `recv`), else None; the read goes on for the next `recv`, so nothing is lost."""
        if self._peeked is not None:
            return self._peeked
        if self._ahead is None:
            self._ahead = asyncio.ensure_future(self._receive())
        done, _ = await asyncio.wait([self._ahead], timeout=timeout_s)
        if not done:
            return None
        self._peeked = await self._ahead
        self._ahead = None
        return self._peeked

    async def _receive(self) -> str | bytes:
        if self._closed:
            raise ClientGone
        message = await self._ws.receive()
        if message["type"] == "websocket.disconnect":
            self._closed = True
            self._close_code = message.get("code")
            raise ClientGone
        data: str | bytes | None = message.get("text")
        if data is None:
            data = message.get("bytes") or b""
        return data

    async def send(self, frame: str | bytes) -> None:
        """Send one message, waiting while the client's socket is full."""
        message: dict[str, Any] = {"type": "websocket.send"}
        message["text" if isinstance(frame, str) else "bytes"] = frame
        try:
            await self._ws.send(message)
        except (OSError, RuntimeError, WebSocketDisconnect) as exc:
            self._closed = True
            raise ClientGone from exc

    async def close(self, code: int, error: str | None = None) -> None:
        """Close with `code`; the reason names `error`, the code of the error that ended
        the stream (None: a clean end), so every close is worded in one place."""
        with contextlib.suppress(OSError, RuntimeError, WebSocketDisconnect):
            await self._ws.close(code, close_reason(error))

    def limit_write_buffer(self, high: int) -> None:
        """Make `send` wait once this much is buffered for the client (a slow reader is
        noticed early, and what it leaves unread stays small)."""
        if self._transport is not None:
            self._transport.set_write_buffer_limits(high=high)  # type: ignore[attr-defined]

    def abort(self) -> None:
        """Drop the TCP connection at once: for a client that stopped reading."""
        self._closed = True
        if self._transport is not None:
            self._transport.abort()  # type: ignore[attr-defined]
