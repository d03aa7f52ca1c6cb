"""A loopback TCP proxy that can cut every connection through it at once, as a network
that drops does: for tests of clients and servers that must survive it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class CuttingProxy:
    """Forwards 127.0.0.1:`port` to `target_port`; `cut()` aborts what is open."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.cuts = 0
        self._open: set[asyncio.StreamWriter] = set()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._open |= {writer, up_writer}
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self._open -= {writer, up_writer}

    def cut(self) -> None:
        """Drop every open connection at once, both ways, with no closing handshake."""
        self.cuts += 1
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[CuttingProxy]:
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            self.cut()
            server.close()
            await server.wait_closed()
