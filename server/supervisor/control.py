"""The supervisor's side of its workers' channels: the one owner of host-wide state.

Admission counts (server.host.admission), the sessions each client secret opened
(server.host.token_uses), which worker runs each live stream, and the follows and resumes
relayed between workers live here. A worker whose channel closes (it stopped, or
was killed) gives back every lease it held, its streams are unlisted, the followers
elsewhere of its streams are told the stream was lost, and its resumes' pipes are hung up.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from engine.remote.unix import bind_private
from server.host.admission import Admission, Kind
from server.host.channel import Channel, ChannelClosedError
from server.host.messages import (
    HAND_OVER_WAIT_S,
    MOVING,
    NOT_WAITING,
    Acquire,
    CloseStream,
    Describe,
    Follow,
    Followed,
    Gather,
    GiveBackToken,
    HandOver,
    HangUp,
    Joined,
    ListStreams,
    OpenStream,
    Pipe,
    Ready,
    Relay,
    Release,
    Report,
    Retire,
    Subscribe,
    TakeUp,
    Topic,
    Unfollow,
    UseToken,
    Why,
)
from server.host.token_uses import TokenUses
from server.resume.handover import Handover
from server.streams.hub import KeyWaits

log = logging.getLogger("sensestream.supervisor")


@dataclass(eq=False)
class WorkerLink:
    """One worker's channel, once it has said which worker it is. Leases, streams and
    follows belong to the link, not to the worker's index: a restarted worker's new link
    never takes over what its dead predecessor held."""

    control: Control
    owner: int  # this link's id, unique for the supervisor's life
    channel: Channel | None = None
    worker: int = -1
    pid: int = 0
    ready: asyncio.Event = field(default_factory=asyncio.Event)  # loaded, taking connections

    async def answer(self, body: object) -> object:
        return await self.control.answer(self, body)

    def notice(self, body: object) -> None:
        self.control.notice(self, body)


@dataclass(frozen=True, slots=True)
class _Follow:
    owner: WorkerLink  # runs the stream
    follower: WorkerLink


@dataclass(frozen=True, slots=True)
class _Pipe:
    owner: WorkerLink  # runs the stream
    client: WorkerLink  # holds the resumed client's socket

    def other(self, link: WorkerLink) -> WorkerLink:
        return self.owner if link is self.client else self.client


class Control:
    """Answers workers' calls; `gathered` adds the supervisor's own view to a gather."""

    def __init__(
        self,
        admission: Admission,
        gathered: Callable[[Topic, list[tuple[int, object]]], Awaitable[object]],
    ) -> None:
        self.admission = admission
        self.token_uses = TokenUses()  # sessions each client secret opened, host-wide
        self._gathered = gathered
        self.links: dict[int, WorkerLink] = {}  # by worker index: the current ones
        self._owners = itertools.count()
        self._streams: dict[str, WorkerLink] = {}  # key → the worker that runs it
        self._opened = KeyWaits()  # keys a follow waits for
        self._follows: dict[str, _Follow] = {}
        self._pipes: dict[str, _Pipe] = {}  # resumes piped from one worker to another
        # Streams a retiring worker handed over, by key, until a resume takes them (or
        # the loop time in the pair passes: their grace ran out).
        self._handed: dict[str, tuple[Handover, float]] = {}
        self._handing = KeyWaits()  # resumes that wait for a stream's hand-over
        self._joined = asyncio.Event()  # set (and cleared) whenever a worker joins
        self._every_link: set[WorkerLink] = set()  # a retiring worker's, beside its successor's
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
        link = WorkerLink(self, next(self._owners))
        link.channel = Channel(reader, writer, link)
        self._every_link.add(link)
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
                self._joined.set()
                self._joined.clear()
            case Ready():
                link.ready.set()
            case GiveBackToken():
                self.token_uses.give_back(body.token_id)
            case Release():
                self.admission.release(body.lease)
            case CloseStream():
                if self._streams.get(body.key) is link:
                    del self._streams[body.key]
            case Relay():
                follow = self._follows.get(body.follow_id)
                if follow is not None:
                    _send(follow.follower, body)
            case Unfollow():
                follow = self._follows.pop(body.follow_id, None)
                if follow is not None:
                    _send(follow.owner if link is follow.follower else follow.follower, body)
            case Pipe() | HangUp():
                self._piped(link, body)

    def _piped(self, link: WorkerLink, body: Pipe | HangUp) -> None:
        """A piped resume's frame (or its end) goes on to the pipe's other end."""
        pipe = self._pipes.get(body.pipe_id)
        if isinstance(body, HangUp):
            self._pipes.pop(body.pipe_id, None)
        if pipe is not None:
            _send(pipe.other(link), body)

    def _gone(self, link: WorkerLink) -> None:
        """A worker's channel closed: everything it held is released."""
        self._every_link.discard(link)
        if self.links.get(link.worker) is link:
            del self.links[link.worker]
        released = self.admission.release_owner(link.owner)
        for key in [k for k, owner in self._streams.items() if owner is link]:
            del self._streams[key]
        for follow_id, follow in list(self._follows.items()):
            if follow.owner is link:
                _send(follow.follower, Unfollow(follow_id, Why.LOST))
            if link in (follow.owner, follow.follower):
                del self._follows[follow_id]
        for pipe_id, pipe in list(self._pipes.items()):
            if link in (pipe.owner, pipe.client):
                del self._pipes[pipe_id]
                _send(pipe.other(link), HangUp(pipe_id))
        log.info("worker %d left: %d lease(s) released", link.worker, released)

    def leases(self, worker: int | None = None) -> dict[str, int]:
        """The leases held, by kind: host-wide, or by `worker`'s current process (none
        while it is not connected: a dead one's are not its successor's)."""
        if worker is None:
            return {kind.value: self.admission.count(kind) for kind in Kind}
        link = self.links.get(worker)
        owner = link.owner if link is not None else None
        return {
            kind.value: 0 if owner is None else self.admission.count(kind, owner) for kind in Kind
        }

    # ---- calls -------------------------------------------------------------------------

    async def answer(self, link: WorkerLink, body: object) -> object:
        match body:
            case Acquire(peek=True):
                return self.admission.refusal(body.kind, body.peer)
            case Acquire():
                return self.admission.acquire(body.kind, body.peer, link.owner, body.force)
            case UseToken():
                return self.token_uses.use(
                    body.token_id, body.limit, body.expires_at, body.now, body.peek
                )
            case OpenStream():
                return self._open(link, body.key)
            case ListStreams():
                reports = await self._ask_all(Describe())
                return [d for _, listed in reports if isinstance(listed, list) for d in listed]
            case Follow():
                return await self._follow(link, body)
            case TakeUp():
                return await self._take_up(link, body)
            case HandOver():
                return self._hand_over(link, body)
            case Gather():
                return await self._gathered(body.topic, await self._ask_all(Report(body.topic)))
        raise ValueError(f"not a supervisor call: {type(body).__name__}")

    def _open(self, link: WorkerLink, key: str) -> bool:
        if self._streams.setdefault(key, link) is not link:
            return False
        self._opened.appeared(key)
        return True

    async def _follow(self, link: WorkerLink, body: Follow) -> Followed:
        owner = self._streams.get(body.key)
        if owner is None and body.wait_s > 0:
            await self._opened.wait(body.key, body.wait_s)
            owner = self._streams.get(body.key)
        if owner is None:
            return Followed.MISSING
        if owner is link:
            return Followed.HERE
        # Listed before asking: the owner's relays may overtake its answer here.
        self._follows[body.follow_id] = _Follow(owner, link)
        where: object = Followed.MISSING
        with contextlib.suppress(ChannelClosedError):
            where = await _ask(owner, Subscribe(body.follow_id, body.key))
        if where is not Followed.RELAYED:
            self._follows.pop(body.follow_id, None)
        return where if isinstance(where, Followed) else Followed.MISSING

    def _hand_over(self, link: WorkerLink, body: HandOver) -> bool:
        """Keep a retiring worker's stream for its client's resume; its name is free."""
        key = body.handover.key
        if self._streams.get(key) is link:
            del self._streams[key]
        now = asyncio.get_running_loop().time()
        self._handed = {k: kept for k, kept in self._handed.items() if kept[1] > now}
        self._handed[key] = (body.handover, now + body.wait_s)
        self._handing.appeared(key)
        return True

    def _handed_over(self, key: str, session_id: str) -> Handover | None:
        kept = self._handed.get(key)
        if kept is None or kept[0].session_id != session_id:
            return None
        del self._handed[key]
        live = kept[1] > asyncio.get_running_loop().time()
        return kept[0] if live else None

    async def _take_up(self, link: WorkerLink, body: TakeUp) -> str | Handover | None:
        """Hand a stream a retiring worker left to the worker its resume landed on; else
        pass the resume on to the worker that runs the stream, and pipe between them."""
        handover = self._handed_over(body.key, body.session_id)
        if handover is not None:
            return handover
        owner = self._streams.get(body.key)
        if owner is None or owner is link:
            return NOT_WAITING
        # Listed before asking: the owner's first frames may overtake its answer here.
        self._pipes[body.pipe_id] = _Pipe(owner, link)
        answer: object = "the stream's worker did not answer"
        with contextlib.suppress(ChannelClosedError):
            answer = await _ask(owner, body)
        if answer is None:
            return None
        self._pipes.pop(body.pipe_id, None)
        # Refused, or still being handed over: its hand-over may be on its way (a stream
        # is handed over before its client is told to resume, but a resume can overtake).
        if answer == MOVING and body.key not in self._handed:
            await self._handing.wait(body.key, HAND_OVER_WAIT_S)
        handover = self._handed_over(body.key, body.session_id)
        if handover is not None:
            return handover
        if answer == MOVING:
            return NOT_WAITING
        return answer if isinstance(answer, str) else "the stream could not be taken up"

    # ---- reloads -------------------------------------------------------------------------

    async def until_ready(self, pid: int, timeout_s: float) -> bool:
        """Whether the worker process `pid` joined and said it is ready within `timeout_s`."""
        try:
            async with asyncio.timeout(timeout_s):
                while (link := self._link_of(pid)) is None:
                    await self._joined.wait()
                await link.ready.wait()
        except TimeoutError:
            return False
        return True

    def retire(self, pid: int) -> bool:
        """Tell the worker process `pid` to hand its streams on and exit; whether it could
        be told (it is connected)."""
        link = self._link_of(pid)
        if link is None or link.channel is None or link.channel.closed:
            return False
        link.channel.notify(Retire())
        return True

    def _link_of(self, pid: int) -> WorkerLink | None:
        return next((link for link in self._every_link if link.pid == pid), None)

    async def _ask_all(self, body: object) -> list[tuple[int, object]]:
        """Every worker's answer (None for one that did not answer), by worker index."""
        links = sorted(self.links.items())

        async def one(link: WorkerLink) -> object:
            try:
                return await _ask(link, body)
            except ChannelClosedError:
                return None

        answers = await asyncio.gather(*(one(link) for _, link in links))
        return [(worker, answer) for (worker, _), answer in zip(links, answers, strict=True)]


async def _ask(link: WorkerLink, body: object) -> object:
    if link.channel is None:
        raise ChannelClosedError(f"worker {link.worker} is not connected")
    return await link.channel.call(body)


def _send(link: WorkerLink, body: object) -> None:
    if link.channel is not None:
        link.channel.notify(body)
