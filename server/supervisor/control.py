"""The supervisor's side of its workers' channels: the one owner of host-wide state.

Admission counts (server.host.admission), which worker runs each live stream, and the
follows relayed between workers live here. A worker whose channel closes (it stopped, or
was killed) gives back every lease it held, its streams are unlisted, and the followers
elsewhere of its streams are told the stream was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from engine.remote.unix import bind_private
from server.host.admission import Admission
from server.host.channel import Channel, ChannelClosedError
from server.host.messages import (
    Acquire,
    CloseStream,
    Describe,
    Follow,
    Followed,
    Gather,
    Joined,
    ListStreams,
    OpenStream,
    Relay,
    Release,
    Report,
    Subscribe,
    Topic,
    Unfollow,
    Why,
)

log = logging.getLogger("sensestream.supervisor")


@dataclass(eq=False)
class WorkerLink:
    """One worker's channel, once it has said which worker it is."""

    control: Control
    channel: Channel | None = None
    worker: int = -1
    pid: int = 0
    joined: asyncio.Event = field(default_factory=asyncio.Event)

    async def answer(self, body: object) -> object:
        return await self.control.answer(self, body)

    def notice(self, body: object) -> None:
        self.control.notice(self, body)


@dataclass(frozen=True, slots=True)
class _Follow:
    owner: int
    follower: int


class Control:
    """Answers workers' calls; `gathered` adds the supervisor's own view to a gather."""

    def __init__(
        self,
        admission: Admission,
        gathered: Callable[[Topic, list[tuple[int, object]]], Awaitable[object]],
    ) -> None:
        self.admission = admission
        self._gathered = gathered
        self.links: dict[int, WorkerLink] = {}
        self._streams: dict[str, int] = {}  # key → the worker that runs it
        self._opened: dict[str, asyncio.Event] = {}  # keys a follow waits for
        self._waiters: Counter[str] = Counter()
        self._follows: dict[str, _Follow] = {}
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, path: str) -> None:
        sock = bind_private(path)
        self._server = await asyncio.start_unix_server(self._connected, sock=sock)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self.links.values()):
            if link.channel is not None:
                link.channel.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = WorkerLink(self)
        link.channel = Channel(reader, writer, link)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await link.channel.run()
        finally:
            self._gone(link)
            if task is not None:
                self._tasks.discard(task)

    # ---- notices -----------------------------------------------------------------------

    def notice(self, link: WorkerLink, body: object) -> None:
        match body:
            case Joined():
                link.worker, link.pid = body.worker, body.pid
                self.links[body.worker] = link
                link.joined.set()
            case Release():
                self.admission.release(body.lease)
            case CloseStream():
                if self._streams.get(body.key) == link.worker:
                    del self._streams[body.key]
            case Relay():
                follow = self._follows.get(body.follow_id)
                if follow is not None:
                    self._send(follow.follower, body)
            case Unfollow():
                follow = self._follows.pop(body.follow_id, None)
                if follow is not None:
                    other = follow.owner if link.worker == follow.follower else follow.follower
                    self._send(other, body)

    def _gone(self, link: WorkerLink) -> None:
        """A worker's channel closed: everything it held is released."""
        if self.links.get(link.worker) is not link:
            return
        del self.links[link.worker]
        released = self.admission.release_owner(link.worker)
        for key in [k for k, w in self._streams.items() if w == link.worker]:
            del self._streams[key]
        for follow_id, follow in list(self._follows.items()):
            if follow.owner == link.worker:
                self._send(follow.follower, Unfollow(follow_id, Why.LOST))
            if link.worker in (follow.owner, follow.follower):
                del self._follows[follow_id]
        log.info("worker %d left: %d lease(s) released", link.worker, released)

    def _send(self, worker: int, body: object) -> None:
        link = self.links.get(worker)
        if link is not None and link.channel is not None:
            link.channel.notify(body)

    # ---- calls -------------------------------------------------------------------------

    async def answer(self, link: WorkerLink, body: object) -> object:
        match body:
            case Acquire(peek=True):
                return self.admission.refusal(body.kind, body.peer)
            case Acquire():
                return self.admission.acquire(body.kind, body.peer, link.worker)
            case OpenStream():
                return self._open(link.worker, body.key)
            case ListStreams():
                reports = await self._ask_all(Describe())
                return [d for _, listed in reports if isinstance(listed, list) for d in listed]
            case Follow():
                return await self._follow(link.worker, body)
            case Gather():
                return await self._gathered(body.topic, await self._ask_all(Report(body.topic)))
        raise ValueError(f"not a supervisor call: {type(body).__name__}")

    def _open(self, worker: int, key: str) -> bool:
        if self._streams.setdefault(key, worker) != worker:
            return False
        waiting = self._opened.pop(key, None)
        if waiting is not None:
            waiting.set()
        return True

    async def _follow(self, worker: int, body: Follow) -> Followed:
        owner = self._streams.get(body.key)
        if owner is None and body.wait_s > 0:
            await self._wait_open(body.key, body.wait_s)
            owner = self._streams.get(body.key)
        if owner is None:
            return Followed.MISSING
        if owner == worker:
            return Followed.HERE
        # Listed before asking: the owner's relays may overtake its answer here.
        self._follows[body.follow_id] = _Follow(owner, worker)
        where: object = Followed.MISSING
        with contextlib.suppress(ChannelClosedError):
            where = await self._ask(owner, Subscribe(body.follow_id, body.key))
        if where is not Followed.RELAYED:
            self._follows.pop(body.follow_id, None)
        return where if isinstance(where, Followed) else Followed.MISSING

    async def _wait_open(self, key: str, wait_s: float) -> None:
        opened = self._opened.setdefault(key, asyncio.Event())
        self._waiters[key] += 1
        try:
            async with asyncio.timeout(wait_s):
                await opened.wait()
        except TimeoutError:
            pass
        finally:
            self._waiters[key] -= 1
            if not self._waiters[key]:  # the last waiter takes the event with it
                del self._waiters[key]
                if self._opened.get(key) is opened:
                    del self._opened[key]

    async def _ask(self, worker: int, body: object) -> object:
        link = self.links.get(worker)
        if link is None or link.channel is None:
            raise ChannelClosedError(f"worker {worker} is not connected")
        return await link.channel.call(body)

    async def _ask_all(self, body: object) -> list[tuple[int, object]]:
        """Every worker's answer (None for one that did not answer), by worker index."""
        workers = sorted(self.links)

        async def one(worker: int) -> object:
            try:
                return await self._ask(worker, body)
            except ChannelClosedError:
                return None

        answers = await asyncio.gather(*map(one, workers))
        return list(zip(workers, answers, strict=True))
