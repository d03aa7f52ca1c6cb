"""A worker's link to its supervisor: host-wide admission and streams, over one channel.

The worker asks the supervisor for leases and for followed streams, tells it which streams
start and end here, and answers its questions (this worker's streams, stats, metrics). A
stream followed from another worker is relayed: this worker subscribes in its own hub and
sends each event on as a `Relay` notice, in order, with backpressure from the channel.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from server.host.admission import Kind, Scope
from server.host.channel import CALL_DEADLINE_S, Channel, ChannelClosedError
from server.host.local import follow_here
from server.host.messages import (
    HAND_OVER_WAIT_S,
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
from server.http.tenants import Tenant
from server.live.socket_port import SocketPort
from server.resume.handover import Handover
from server.resume.pipes import ClientEnd, PipePort
from server.streams.hub import MAX_SUBSCRIBERS, LiveStream, StreamHub, Subscription
from streaming.errors import StreamIdTakenError
from streaming.events import Ended, ErrorEvent
from streaming.protocols.v1.codec import ResumeRequest

log = logging.getLogger("sensestream.host")

#: What a follower of a stream on a worker that stopped is told.
LOST = ErrorEvent("stream_lost", "the worker process serving this stream stopped")


@dataclass(frozen=True, slots=True)
class WorkerSeat:
    """Which worker this process is, where its supervisor listens, and the listening
    sockets it inherited (file descriptors: the main port's, then the ops port's)."""

    worker: int
    control: str
    listen_fds: tuple[int, ...]
    ops_fds: tuple[int, ...] = ()
    # Take connections while still loading (health answers during a cold start): the
    # first worker's first start only; every other waits until it is ready.
    serve_early: bool = False


class WorkerState(Protocol):
    """What the link reports of its worker (the app)."""

    @property
    def streams(self) -> StreamHub: ...

    def local_stats(self) -> dict[str, Any]: ...

    def local_metrics(self) -> bytes: ...


class HostLink:
    """The worker's side of its channel to the supervisor (a `Host` and a
    `StreamObserver`)."""

    def __init__(
        self, worker: int, control: str, state: WorkerState, follower_capacity: int
    ) -> None:
        self.worker = worker
        self._control = control
        self._state = state
        self._channel: Channel | None = None
        self._reading: asyncio.Task[None] | None = None
        self._ids = itertools.count()
        # In ids this worker makes: a reload runs a worker beside its replacement, which
        # has the same index, and their follows and pipes must not share ids.
        self._pid = os.getpid()
        self._follows: dict[str, Subscription] = {}  # followers here of streams elsewhere
        self._relays: dict[str, asyncio.Task[None]] = {}  # streams here followed elsewhere
        self._tasks: set[asyncio.Task[None]] = set()
        self._follower_capacity = follower_capacity  # what a relayed follower may queue
        self.on_lost: Callable[[], None] | None = None  # the supervisor went away
        # A resume that landed elsewhere, for a stream here: whether it was taken up
        # (None) or why not.
        self.on_take_up: Callable[[PipePort, TakeUp], Awaitable[str | None]] | None = None
        self._pipes: dict[str, PipePort | ClientEnd] = {}  # resumes piped, either end
        self.on_retire: Callable[[], None] | None = None  # a reload replaces this worker
        self._closing = False

    async def connect(self) -> None:
        reader, writer = await asyncio.open_unix_connection(self._control)
        self._channel = Channel(reader, writer, self)
        self._reading = asyncio.create_task(self._channel.run(), name="host-link")
        self._reading.add_done_callback(self._ended)
        self._channel.notify(Joined(self.worker, os.getpid()))

    def _ended(self, _: asyncio.Task[None]) -> None:
        for pipe_id, end in list(self._pipes.items()):  # the other ends are out of reach
            end.hung_up(HangUp(pipe_id))
        self._pipes.clear()
        if not self._closing and self.on_lost is not None:
            log.error("the supervisor went away: this worker stops")
            self.on_lost()

    @property
    def connected(self) -> bool:
        return self._channel is not None and not self._channel.closed

    async def close(self) -> None:
        self._closing = True
        for task in (*self._relays.values(), *self._tasks):
            task.cancel()
        if self._channel is not None:
            self._channel.close()
        if self._reading is not None:
            await asyncio.gather(self._reading, return_exceptions=True)

    # ---- Host --------------------------------------------------------------------------

    async def acquire(self, kind: Kind, peer: str, force: bool = False) -> int | Scope:
        # Without its supervisor this worker is stopping: it admits no one (fails closed).
        try:
            got = await self._call(Acquire(kind, peer, force=force))
        except ChannelClosedError:
            return Scope.TOTAL
        return got if isinstance(got, int | Scope) else Scope.TOTAL

    async def refusal(self, kind: Kind, peer: str) -> Scope | None:
        try:
            got = await self._call(Acquire(kind, peer, peek=True))
        except ChannelClosedError:
            return Scope.TOTAL
        return got if isinstance(got, Scope) else None

    def release(self, lease: int) -> None:
        if self._channel is not None:
            self._channel.notify(Release(lease))

    async def use_token(
        self, token_id: str, limit: int, expires_at: float, now: float, peek: bool = False
    ) -> bool:
        # Without its supervisor the count is unknown: the token opens nothing (fails closed).
        try:
            got = await self._call(UseToken(token_id, limit, expires_at, now, peek))
        except ChannelClosedError:
            return False
        return got is True

    def give_back_token(self, token_id: str) -> None:
        if self._channel is not None:
            self._channel.notify(GiveBackToken(token_id))

    async def follow(self, key: str, wait_s: float) -> Subscription | Followed:
        follow_id = f"{self.worker}.{self._pid}.{next(self._ids)}"
        sub = Subscription(None, self._follower_capacity, lambda: self._left(follow_id))
        self._follows[follow_id] = sub  # relays may come before the answer does
        try:
            where = await self._call(Follow(key, wait_s, follow_id), wait_s + CALL_DEADLINE_S)
        except ChannelClosedError:
            where = Followed.MISSING
        except BaseException:  # cancelled (its client left): the owner stops relaying
            self._left(follow_id)
            raise
        if where is not Followed.RELAYED:
            self._follows.pop(follow_id, None)
        if where is Followed.HERE:
            found = await follow_here(self._state.streams, key, 0.0)
            ended = self._state.streams.subscribe_ended(key)
            return ended if found is Followed.MISSING and ended is not None else found
        if where is Followed.RELAYED:
            return sub
        return where if isinstance(where, Followed) else Followed.MISSING

    async def streams(self, viewer: Tenant | None) -> list[dict[str, object]]:
        try:
            described = await self._call(ListStreams())
        except ChannelClosedError:
            described = self._state.streams.describe(None)  # this worker's, at least
        listed = described if isinstance(described, list) else []
        return [d for d in listed if viewer is None or viewer.sees(d.get("tenant") or "")]

    async def gather(self, topic: Topic) -> object:
        """Every process's stats (`Gathered`) or metrics (exposition bytes); None when
        the supervisor does not answer (the caller answers with this worker's own)."""
        try:
            return await self._call(Gather(topic), 2 * CALL_DEADLINE_S)
        except ChannelClosedError:
            return None

    # ---- StreamObserver ----------------------------------------------------------------

    def opened(self, stream: LiveStream) -> None:
        task = asyncio.create_task(self._claim(stream), name="claim-stream")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def closed(self, stream: LiveStream) -> None:
        if self._channel is not None:
            self._channel.notify(CloseStream(stream.key))

    async def _claim(self, stream: LiveStream) -> None:
        """Ends the session if another worker had the stream's id first."""
        try:
            ok = await self._call(OpenStream(stream.key))
        except ChannelClosedError:
            return  # the supervisor is gone: this worker is stopping anyway
        if ok is False and not stream.ended and stream.refuse is not None:
            stream.refuse(StreamIdTakenError(f"stream {stream.stream_id!r} is already live"))
        elif ok is True and stream.ended and self._channel is not None:
            # It ended before its claim was answered: its CloseStream may have overtaken
            # the claim, which would leave the id held; closing again is harmless.
            self._channel.notify(CloseStream(stream.key))

    # ---- Handler: the supervisor's calls and notices ------------------------------------

    async def answer(self, body: object) -> object:
        match body:
            case Describe():
                return self._state.streams.describe(None)
            case Subscribe():
                return self._subscribe(body)
            case TakeUp():
                return await self._take_up(body)
            case Report(topic=Topic.STATS):
                return self._state.local_stats()
            case Report(topic=Topic.METRICS):
                return self._state.local_metrics()
        raise ValueError(f"not a worker call: {type(body).__name__}")

    def notice(self, body: object) -> None:
        match body:
            case Relay():
                sub = self._follows.get(body.follow_id)
                if sub is not None:
                    sub.put(body.event)  # one too far behind is dropped (its Follower)
            case Unfollow():
                self._unfollowed(body)
            case Retire():
                if self.on_retire is not None:
                    self.on_retire()
            case Pipe():
                end = self._pipes.get(body.pipe_id)
                if end is not None:
                    end.received(body.data)
            case HangUp():
                end = self._pipes.pop(body.pipe_id, None)
                if end is not None:
                    end.hung_up(body)

    def _subscribe(self, body: Subscribe) -> Followed:
        hub = self._state.streams
        stream = hub.get(body.key)
        if stream is not None and len(stream.subscribers) >= MAX_SUBSCRIBERS:
            return Followed.FULL
        # Ended since the supervisor saw it live: the follower still gets all of it.
        sub = hub.subscribe(body.key) or hub.subscribe_ended(body.key)
        if sub is None:
            return Followed.MISSING
        task = asyncio.create_task(self._relay(body.follow_id, sub), name="relay")
        self._relays[body.follow_id] = task
        return Followed.RELAYED

    async def _relay(self, follow_id: str, sub: Subscription) -> None:
        channel = self._channel
        try:
            while channel is not None and not sub.dropped.is_set():
                event = await sub.outbox.get()
                channel.notify(Relay(follow_id, event))
                if isinstance(event, Ended):
                    return
                await channel.drain()
            if channel is not None:
                channel.notify(Unfollow(follow_id, Why.SLOW))
        finally:
            sub.leave()
            self._relays.pop(follow_id, None)

    def _unfollowed(self, body: Unfollow) -> None:
        relay = self._relays.pop(body.follow_id, None)
        if relay is not None:  # the follower elsewhere left
            relay.cancel()
            return
        sub = self._follows.pop(body.follow_id, None)
        if sub is None:
            return
        if body.why is Why.LOST:
            if not (sub.put(LOST) and sub.put(Ended())):
                sub.dropped.set()
        else:
            sub.dropped.set()

    def _left(self, follow_id: str) -> None:
        if self._follows.pop(follow_id, None) is not None and self._channel is not None:
            self._channel.notify(Unfollow(follow_id))

    # ---- resumes piped between workers -------------------------------------------------

    async def take_up_elsewhere(
        self, port: SocketPort, key: str, session_id: str, request: ResumeRequest
    ) -> ClientEnd | Handover | str:
        """A resume for a stream this worker does not hold: the end that pipes the client
        to the worker that does (run it), the stream itself when its worker retired and
        handed it over (go on with it here), or why it cannot be taken up."""
        pipe_id = f"{self.worker}.{self._pid}.{next(self._ids)}"
        end = ClientEnd(port, pipe_id, self._pipe_notice, self._pipe_drain)
        self._pipes[pipe_id] = end  # its first frames may come before the answer does
        try:
            take_up = TakeUp(key, session_id, request, pipe_id, port.peer)
            answer = await self._call(take_up, HAND_OVER_WAIT_S + CALL_DEADLINE_S)
        except ChannelClosedError as exc:
            answer = f"the stream's worker could not be asked: {exc}"
        if answer is None:
            return end
        self._pipes.pop(pipe_id, None)
        if isinstance(answer, Handover | str):
            return answer
        return "the stream could not be taken up"

    async def hand_over(self, handover: Handover, wait_s: float) -> bool:
        """Give a stream up for the worker its client resumes on; whether it was kept."""
        try:
            return await self._call(HandOver(handover, wait_s)) is True
        except ChannelClosedError:
            return False

    def ready(self) -> None:
        """Tell the supervisor this worker has loaded (a reload waits for it)."""
        if self._channel is not None:
            self._channel.notify(Ready(self.worker))

    async def _take_up(self, body: TakeUp) -> str | None:
        if self.on_take_up is None:
            return "this worker resumes no streams"
        port = PipePort(body.pipe_id, body.peer, self._pipe_notice, self._pipe_drain)
        self._pipes[body.pipe_id] = port
        refused = await self.on_take_up(port, body)
        if refused is not None:
            self._pipes.pop(body.pipe_id, None)
        return refused

    def _pipe_notice(self, body: object) -> None:
        if isinstance(body, HangUp):  # this end is over: nothing more is handed to it
            self._pipes.pop(body.pipe_id, None)
        if self._channel is not None:
            self._channel.notify(body)

    async def _pipe_drain(self) -> None:
        if self._channel is not None:
            await self._channel.drain()

    async def _call(self, body: object, deadline_s: float = CALL_DEADLINE_S) -> object:
        if self._channel is None:
            raise ChannelClosedError("not connected to the supervisor")
        return await self._channel.call(body, deadline_s)
