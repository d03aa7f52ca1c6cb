"""A resume that lands on a worker other than the stream's: the client's frames are piped
through the supervisor, both ways, as `Pipe` notices, and either end's going as `HangUp`.

The stream's worker serves the pipe as its connection's port (`PipePort`); the landing
worker moves frames between the client's socket and the pipe (`ClientEnd`). Each end is
registered under the pipe's id with the worker's link, which hands it what arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable

from server.host.messages import HangUp, Pipe
from server.live.socket_port import LEAVING_CODES, ClientGone, SocketPort

#: What a pipe's receiving end may hold unread before the pipe is dropped: a resuming
#: client resends its kept audio at once (a grace's worth: 30 s of 16 kHz PCM is
#: 960 kB), and the stream takes it at its own pace.
MAX_PIPED_BYTES = 4 << 20

Notify = Callable[[object], None]


class PipeOverflowError(Exception):
    """More came down a pipe than its end may hold."""


class _Inbox:
    """Frames that came down a pipe, not yet taken, bounded in bytes."""

    def __init__(self) -> None:
        self._frames: deque[str | bytes] = deque()
        self._bytes = 0
        self._ready = asyncio.Event()
        self.ended = False

    def put(self, data: str | bytes) -> None:
        self._bytes += len(data)
        if self._bytes > MAX_PIPED_BYTES:
            raise PipeOverflowError(f"over {MAX_PIPED_BYTES} bytes waiting in a pipe")
        self._frames.append(data)
        self._ready.set()

    def end(self) -> None:
        self.ended = True
        self._ready.set()

    async def get(self) -> str | bytes | None:
        """The next frame; None once the pipe ended and nothing is left."""
        while not self._frames:
            if self.ended:
                return None
            self._ready.clear()
            await self._ready.wait()
        data = self._frames.popleft()
        self._bytes -= len(data)
        return data


class PipePort:
    """The stream's worker's end: a `Port` whose client is on another worker."""

    def __init__(
        self, pipe_id: str, peer: str, notify: Notify, drain: Callable[[], Awaitable[None]]
    ) -> None:
        self.pipe_id = pipe_id
        self._peer = peer
        self._notify = notify
        self._drain = drain
        self._inbox = _Inbox()
        self._hung_up = False  # either end has ended the pipe
        self._left = False  # the client closed saying it is done

    @property
    def peer(self) -> str:
        return self._peer

    @property
    def closed(self) -> bool:
        return self._inbox.ended

    @property
    def left(self) -> bool:
        return self._left

    async def settle(self) -> None:
        return None  # the landing worker's hang-up said how the client went

    # ---- what the link hands on ---------------------------------------------------------

    def received(self, data: str | bytes) -> None:
        try:
            self._inbox.put(data)
        except PipeOverflowError:
            self.abort()

    def hung_up(self, body: HangUp) -> None:
        """The client went away (or its worker did); `code`: its close code."""
        self._left = body.code in LEAVING_CODES
        self._hung_up = True
        self._inbox.end()

    # ---- Port ----------------------------------------------------------------------------

    async def recv(self) -> str | bytes:
        data = await self._inbox.get()
        if data is None:
            raise ClientGone
        return data

    async def send(self, frame: str | bytes) -> None:
        if self._hung_up:
            raise ClientGone
        self._notify(Pipe(self.pipe_id, frame))
        await self._drain()  # the channel's backpressure: the supervisor reads on

    async def close(self, code: int, error: str | None = None) -> None:
        self._end(HangUp(self.pipe_id, code, error))

    def abort(self) -> None:
        self._end(HangUp(self.pipe_id))

    def _end(self, body: HangUp) -> None:
        if not self._hung_up:
            self._hung_up = True
            self._notify(body)
        self._inbox.end()


class ClientEnd:
    """The landing worker's end: moves the client's frames into the pipe and the stream's
    frames out to the client, until either side ends."""

    def __init__(
        self,
        port: SocketPort,
        pipe_id: str,
        notify: Notify,
        drain: Callable[[], Awaitable[None]],
    ) -> None:
        self.pipe_id = pipe_id
        self._port = port
        self._notify = notify
        self._drain = drain
        self._inbox = _Inbox()
        self._close: HangUp | None = None

    def received(self, data: str | bytes) -> None:
        try:
            self._inbox.put(data)
        except PipeOverflowError:  # the client reads too slowly: as a local one, dropped
            self._notify(HangUp(self.pipe_id))  # the stream parks again
            self.hung_up(HangUp(self.pipe_id))

    def hung_up(self, body: HangUp) -> None:
        if self._close is None:
            self._close = body
        self._inbox.end()

    async def run(self) -> None:
        """Pipe until one side ends; the other side is then told."""
        reading = asyncio.create_task(self._read(), name="pipe-read")
        writing = asyncio.create_task(self._write(), name="pipe-write")
        told = False
        try:
            await asyncio.wait([reading, writing], return_when=asyncio.FIRST_COMPLETED)
            for task in (reading, writing):
                task.cancel()
            await asyncio.gather(reading, writing, return_exceptions=True)
            if self._close is not None:  # the stream's side ended it
                told = True
                await self._hang_up_client()
            else:  # the client went: the stream parks again, unless it said it is done
                await self._port.settle()
                told = True
                self._notify(HangUp(self.pipe_id, self._port.close_code))
        finally:
            for task in (reading, writing):
                task.cancel()
            if not told:  # cancelled (the worker stops): the stream's side must know
                self._notify(HangUp(self.pipe_id))

    async def _read(self) -> None:
        with contextlib.suppress(ClientGone):
            while True:
                self._notify(Pipe(self.pipe_id, await self._port.recv()))
                await self._drain()

    async def _write(self) -> None:
        with contextlib.suppress(ClientGone):
            while (data := await self._inbox.get()) is not None:
                await self._port.send(data)

    async def _hang_up_client(self) -> None:
        close = self._close
        if close is None or close.code is None:
            self._port.abort()
        else:
            await self._port.close(close.code, close.error)
