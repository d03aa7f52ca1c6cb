"""An engine replica in another process on this host, over a Unix socket.

`serve_replica` answers one `EngineReplica`'s calls on a socket; `UnixTransport` is a
gateway's `Transport` to such sockets: one connection per engine socket, on which the
gateway's sender (`tick`) and collector (a long-poll `collect`) call at once, each call
matched to its answer by a call id.

Wire format: frames of a 4-byte big-endian length and a pickle (protocol 5) of a `Call`
or an `Answer`, whose bodies are the records of `engine.remote.messages`. Pickle is
acceptable here, and only here, because both ends are our own processes on our own host:
the socket is created 0600 (through a private folder, so it is never reachable with
looser rights), so only the user running the engine can connect. Never expose it.

A replica id names one engine process: a connection that breaks loses its replica, and
`discover` connects again and learns the id of whatever process answers there now (the
same id if the process lived, a new one if it was restarted).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import pickle
import socket
import stat
import struct
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from engine.errors import ReplicaLostError
from engine.remote.messages import Collected, Hello, Tick
from engine.remote.replica import EngineReplica

log = logging.getLogger("sensestream.engine")

_LENGTH = struct.Struct("!I")
#: The largest frame either end accepts: a tick of many sessions' finals is megabytes;
#: anything near this is a corrupt length, not a message.
MAX_FRAME_BYTES = 1 << 30
#: Seconds a hello may take (a live engine answers in milliseconds).
HELLO_DEADLINE_S = 10.0
#: How long `discover` keeps trying while no engine answers at all (one still starting).
START_WAIT_S = 5.0


@dataclass(frozen=True, slots=True)
class Greet:
    """Ask a replica for its `Hello` (discovery, and a check that it still answers)."""


@dataclass(frozen=True, slots=True)
class Collect:
    """Ask a replica for a gateway's results, waiting up to `wait_s` for the first."""

    gateway: str
    wait_s: float


@dataclass(frozen=True, slots=True)
class Scrape:
    """Ask the engine process for its metrics (Prometheus text), for its supervisor."""


@dataclass(frozen=True, slots=True)
class Call:
    """One call on a connection; its answer carries the same `call_id`."""

    call_id: int
    body: Greet | Tick | Collect | Scrape


@dataclass(frozen=True, slots=True)
class Answer:
    """A call's answer: its value, or why the replica failed it."""

    call_id: int
    value: Hello | Collected | bytes | None = None
    error: str | None = None


# ---- frames ----------------------------------------------------------------------------


def encode(message: object) -> bytes:
    # In-band pickle (no out-of-band buffers): the engine gets audio arrays it owns and may
    # write to, and copying a few seconds of audio costs nothing next to decoding it.
    data = pickle.dumps(message, protocol=5)
    return _LENGTH.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader) -> object:
    """The next message; `asyncio.IncompleteReadError` at the end of the stream."""
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    if length > MAX_FRAME_BYTES:
        raise ConnectionError(f"a frame of {length} bytes: the stream is corrupt")
    return pickle.loads(await reader.readexactly(length))


# ---- the replica's side ----------------------------------------------------------------


class ReplicaServer:
    """One replica's calls answered on a Unix socket; `close` drops every connection."""

    def __init__(
        self, replica: EngineReplica, path: str, scrape: Callable[[], bytes] | None = None
    ) -> None:
        self.replica = replica
        self.path = path
        self._scrape = scrape
        self._server: asyncio.Server | None = None
        self._inode: int | None = None
        # Each connection's handler (asyncio's task) and its writer.
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    async def start(self) -> None:
        sock = bind_private(self.path)
        self._inode = os.stat(self.path).st_ino
        self._server = await asyncio.start_unix_server(self._connection, sock=sock)

    async def close(self) -> None:
        """Stop listening, remove the socket file (if still ours), end every connection."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        # Closing a socket ends its handler as a gateway hanging up would (cancelling
        # the handler, asyncio's task, would have asyncio log it as a failure).
        for writer in self._connections.values():
            writer.close()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def __aenter__(self) -> ReplicaServer:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:  # always, in a stream server's callback
            self._connections[task] = writer
        collects: set[asyncio.Task[None]] = set()
        try:
            while True:
                call = await read_frame(reader)
                if not isinstance(call, Call):
                    raise ConnectionError(f"not a call: {type(call).__name__}")
                if isinstance(call.body, Collect):
                    # Waits: in a task of its own, so ticks go on arriving meanwhile.
                    collect = asyncio.ensure_future(self._collect(call.call_id, call.body, writer))
                    collects.add(collect)
                    collect.add_done_callback(collects.discard)
                else:
                    # Ticks are applied here, in the order they arrived.
                    writer.write(encode(self._answer_now(call)))
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, pickle.UnpicklingError) as exc:
            log.debug("a gateway's connection ended: %s", exc)
        finally:
            for collect in collects:
                collect.cancel()
            await asyncio.gather(*collects, return_exceptions=True)
            writer.close()
            if task is not None:
                self._connections.pop(task, None)

    def _answer_now(self, call: Call) -> Answer:
        try:
            if isinstance(call.body, Tick):
                self.replica.tick(call.body, asyncio.get_running_loop().time())
                return Answer(call.call_id)
            if isinstance(call.body, Scrape):
                return Answer(call.call_id, self._scrape() if self._scrape else b"")
            return Answer(call.call_id, self.replica.hello())
        # The call's boundary: the gateway learns of the failure from the answer (and
        # treats the replica as lost), and this connection goes on serving.
        except Exception as exc:  # logged with its traceback (ruff BLE allows it)
            log.error("a %s call failed", type(call.body).__name__, exc_info=exc)
            return Answer(call.call_id, error=f"{type(exc).__name__}: {exc}")

    async def _collect(self, call_id: int, body: Collect, writer: asyncio.StreamWriter) -> None:
        try:
            got = await self.replica.collect(body.gateway, body.wait_s)
            answer = Answer(call_id, got)
        # As `_answer_now`'s: the failure goes back to the gateway as the call's answer.
        except Exception as exc:  # logged with its traceback (ruff BLE allows it)
            log.error("a collect call failed", exc_info=exc)
            answer = Answer(call_id, error=f"{type(exc).__name__}: {exc}")
        # One write per frame: frames of concurrent answers never interleave.
        writer.write(encode(answer))
        with contextlib.suppress(ConnectionError):
            await writer.drain()


async def serve_replica(
    replica: EngineReplica, path: str, scrape: Callable[[], bytes] | None = None
) -> ReplicaServer:
    """Serve `replica` on a Unix socket at `path` (mode 0600; a stale file is replaced);
    `scrape` answers `Scrape` calls (the engine's metrics)."""
    server = ReplicaServer(replica, path, scrape)
    await server.start()
    return server


def bind_private(path: str) -> socket.socket:
    """A listening socket at `path`, mode 0600 from the moment the name exists.

    Bound inside a fresh 0700 folder beside `path`, made 0600 there, then renamed into
    place: no other user can connect in between, and a stale socket left by a dead
    process is replaced in one step. A live engine's socket, or any other file, is not.
    """
    target = Path(path)
    _refuse_taken(target)
    # Short names: a socket's whole path must fit in 107 bytes.
    private = tempfile.mkdtemp(prefix=".", dir=target.parent)
    staged = os.path.join(private, "s")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(staged)
        os.chmod(staged, 0o600)
        os.rename(staged, target)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(staged)
        os.rmdir(private)
    return sock


def _refuse_taken(target: Path) -> None:
    try:
        mode = target.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(f"{target} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(target))
    except ConnectionRefusedError:
        return  # nobody listens: a dead process's socket
    finally:
        probe.close()
    raise FileExistsError(f"an engine already listens on {target}")


# ---- the gateway's side ----------------------------------------------------------------


@dataclass(eq=False)
class _Connection:
    """One connection to one engine process, and the calls waiting for its answers."""

    path: str
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    replica: str = "(connecting)"
    ids: itertools.count[int] = field(default_factory=itertools.count)
    pending: dict[int, asyncio.Future[Answer]] = field(default_factory=dict)
    lost: str | None = None  # why it broke, once it has
    reading: asyncio.Task[None] | None = None


class UnixTransport:
    """A gateway's calls to engine processes listening on Unix sockets at `paths`."""

    def __init__(self, paths: Sequence[str], *, start_wait_s: float = START_WAIT_S) -> None:
        self._paths = tuple(paths)
        self._start_wait_s = start_wait_s
        self._by_path: dict[str, _Connection] = {}
        self._by_replica: dict[str, _Connection] = {}

    async def discover(self, known: frozenset[str]) -> list[Hello]:
        """The engines not in `known` that answer; while none answers at all, tries again
        for up to `start_wait_s` (an engine may be binding its socket)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._start_wait_s
        delay = 0.05
        while True:
            hellos = [h for h in await asyncio.gather(*map(self._greet, self._paths)) if h]
            fresh = list({h.replica: h for h in hellos if h.replica not in known}.values())
            left = deadline - loop.time()
            if fresh or known or left <= 0:
                return fresh
            # No event tells of a socket appearing: a short, bounded backoff instead.
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, 0.5)

    async def tick(self, replica: str, tick: Tick) -> None:
        await self._call(self._live(replica), tick)

    async def collect(self, replica: str, gateway: str, wait_s: float) -> Collected:
        got = await self._call(self._live(replica), Collect(gateway, wait_s))
        if not isinstance(got, Collected):
            raise ReplicaLostError(replica, f"a collect answered {type(got).__name__}")
        return got

    async def close(self) -> None:
        for conn in list(self._by_path.values()):
            await self._drop(conn, "transport closed")

    async def _greet(self, path: str) -> Hello | None:
        """The hello of the engine at `path` (connecting if need be), None if none answers."""
        conn = self._by_path.get(path)
        try:
            if conn is None or conn.lost:
                conn = await self._connect(path)
            async with asyncio.timeout(HELLO_DEADLINE_S):
                hello = await self._call(conn, Greet())
        except (OSError, ReplicaLostError, TimeoutError) as exc:
            log.debug("no engine answers at %s: %s", path, exc)
            if conn is not None:
                await self._drop(conn, f"no hello: {exc}")
            return None
        if not isinstance(hello, Hello):
            await self._drop(conn, f"a hello answered {type(hello).__name__}")
            return None
        conn.replica = hello.replica
        self._by_replica[hello.replica] = conn
        return hello

    async def _connect(self, path: str) -> _Connection:
        reader, writer = await asyncio.open_unix_connection(path)
        conn = self._by_path[path] = _Connection(path, reader, writer)
        conn.reading = asyncio.get_running_loop().create_task(
            self._read(conn), name=f"engine-socket-{path}"
        )
        return conn

    def _live(self, replica: str) -> _Connection:
        conn = self._by_replica.get(replica)
        if conn is None or conn.lost:
            raise ReplicaLostError(replica, (conn.lost if conn else None) or "not connected")
        return conn

    async def _call(
        self, conn: _Connection, body: Greet | Tick | Collect
    ) -> Hello | Collected | bytes | None:
        if conn.lost:
            raise ReplicaLostError(conn.replica, conn.lost)
        call_id = next(conn.ids)
        answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        conn.pending[call_id] = answer
        try:
            conn.writer.write(encode(Call(call_id, body)))
            await conn.writer.drain()
            got = await answer
        except ConnectionError as exc:
            raise ReplicaLostError(conn.replica, f"{type(exc).__name__}: {exc}") from exc
        finally:
            conn.pending.pop(call_id, None)
        if got.error is not None:
            raise ReplicaLostError(conn.replica, f"the engine failed a call: {got.error}")
        return got.value

    async def _read(self, conn: _Connection) -> None:
        """Hand each answer to its call; when the connection ends, fail what waits."""
        why = "connection closed"
        try:
            while True:
                answer = await read_frame(conn.reader)
                if not isinstance(answer, Answer):
                    raise ConnectionError(f"not an answer: {type(answer).__name__}")
                waiting = conn.pending.pop(answer.call_id, None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(answer)
        except (asyncio.IncompleteReadError, ConnectionError, pickle.UnpicklingError) as exc:
            # A garbled frame ends the connection as a closed one does (the replica is
            # lost and found again), instead of leaving this task's error unretrieved.
            why = f"the engine process went away ({type(exc).__name__})"
        finally:
            self._broken(conn, why)

    def _broken(self, conn: _Connection, why: str) -> None:
        conn.lost = conn.lost or why
        for waiting in conn.pending.values():
            if not waiting.done():
                waiting.set_exception(ReplicaLostError(conn.replica, conn.lost))
        conn.pending.clear()
        conn.writer.close()

    async def _drop(self, conn: _Connection, why: str) -> None:
        conn.lost = conn.lost or why
        if self._by_path.get(conn.path) is conn:
            del self._by_path[conn.path]
        if self._by_replica.get(conn.replica) is conn:
            del self._by_replica[conn.replica]
        if conn.reading is not None:
            conn.reading.cancel()
            await asyncio.gather(conn.reading, return_exceptions=True)
        self._broken(conn, why)
