"""Live streams by id, and the subscribers that follow them.

A telephony platform opens the socket and only sends audio; the transcript is wanted
elsewhere (an agent-assist screen, a QA pipeline). Every session is published here under
its stream id once configured; a subscriber gets the stream's `Configured`, the finals it
missed (a bounded backlog), then every event from the moment it joined, in order. A
subscriber that cannot keep up is dropped with an error; the call never waits for it.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from server.http.tenants import ANONYMOUS, Claim, Tenant, stream_key
from server.live.outbox import Outbox, OutboxOverflowError
from server.streams.webhooks import WebhookDelivery, Webhooks
from streaming.errors import (
    ProtocolError,
    StreamIdTakenError,
    UnauthorizedError,
    WebhookRefusedError,
)
from streaming.events import (
    Configured,
    Ended,
    ErrorEvent,
    Failed,
    Final,
    Marked,
    SessionEvent,
)
from streaming.protocols.v1.codec import event_to_dict

#: The finals a late subscriber can still catch up on, per stream (by default).
MAX_BACKLOG = 500
#: Followers of one stream (each holds a socket and a bounded outbox).
MAX_SUBSCRIBERS = 32
#: How long, and how many, ended streams are kept for a follower on another worker whose
#: hand-over (two hops through the supervisor) crossed the stream's end.
ENDED_GRACE_S = 5.0
MAX_ENDED = 256


class StreamFullError(Exception):
    """The stream already has `MAX_SUBSCRIBERS` followers."""


class Subscription:
    """One follower of a stream: its own bounded outbox, and whether it was dropped.

    A follower of a stream on another worker has no `stream` here: its events are relayed
    (server.host.link), and leaving tells the relay through `on_leave`.
    """

    def __init__(
        self,
        stream: LiveStream | None,
        max_pending: int,
        on_leave: Callable[[], None] | None = None,
    ) -> None:
        self.stream = stream
        self.outbox = Outbox(max_pending)
        self.dropped = asyncio.Event()  # set when it fell behind: its socket is closed
        self._on_leave = on_leave

    def put(self, event: SessionEvent) -> bool:
        """Queue one event; False (and dropped) when the subscriber is too far behind."""
        try:
            self.outbox.put(event)
        except OutboxOverflowError:
            self.dropped.set()
            return False
        return True

    def leave(self) -> None:
        """Stop following (once): off the stream's list, and the relay told."""
        if self.stream is not None and self in self.stream.subscribers:
            self.stream.subscribers.remove(self)
        on_leave, self._on_leave = self._on_leave, None
        if on_leave is not None:
            on_leave()


class StreamObserver(Protocol):
    """Told when a stream is listed and unlisted (the host-wide registry of workers)."""

    def opened(self, stream: LiveStream) -> None: ...

    def closed(self, stream: LiveStream) -> None: ...


@dataclass
class LiveStream:
    """A published session: its configuration, the finals so far, its subscribers."""

    stream_id: str
    session_id: str
    protocol: str
    started: float  # wall-clock seconds
    configured: Configured
    backlog: deque[SessionEvent] = field(default_factory=lambda: deque(maxlen=MAX_BACKLOG))
    finals: int = 0
    subscribers: list[Subscription] = field(default_factory=list)
    ended: bool = False
    tenant: str = ""  # whose key started it (server.http.tenants); "" with no keys
    # Ends the session when its id turns out to be taken on another worker (its
    # publisher sets it; the host-wide check answers after the stream is listed here).
    refuse: Callable[[ProtocolError], None] | None = None
    closing: tuple[SessionEvent, ...] = ()  # how it ended: (reason,) Ended, once it has

    @property
    def key(self) -> str:
        """Its name in the hub: its id within its tenant's namespace."""
        return stream_key(self.tenant, self.stream_id)

    def describe(self) -> dict[str, object]:
        """The stream as `GET /v1/streams` lists it."""
        audio = self.configured.audio
        return {
            "stream_id": self.stream_id,
            "tenant": self.tenant or None,
            "session_id": self.session_id,
            "protocol": self.protocol,
            "started": round(self.started, 3),
            "channels": audio.channels,
            "channel_labels": list(self.configured.channel_labels),
            "sample_rate": audio.sample_rate,
            "encoding": audio.encoding,
            "finals": self.finals,
            "subscribers": len(self.subscribers),
        }


class KeyWaits:
    """Waits for names to appear: one event per awaited name, gone with its last waiter."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._waiters: Counter[str] = Counter()

    @property
    def waiting(self) -> int:
        """How many wait, for any name."""
        return self._waiters.total()

    def appeared(self, key: str) -> None:
        """`key` is here now: wake whoever waits for it."""
        waiting = self._events.pop(key, None)
        if waiting is not None:
            waiting.set()

    async def wait(self, key: str, timeout_s: float) -> None:
        """Until `key` appears or `timeout_s` passes (the caller looks it up after)."""
        event = self._events.setdefault(key, asyncio.Event())
        self._waiters[key] += 1
        try:
            async with asyncio.timeout(timeout_s):
                await event.wait()
        except TimeoutError:
            pass
        finally:
            self._waiters[key] -= 1
            if not self._waiters[key]:  # the last waiter takes the event with it
                del self._waiters[key]
                if self._events.get(key) is event:
                    del self._events[key]


class StreamHub:
    """Every live stream by id; publishing to subscribers never blocks the session.

    Streams are looked up by their key (server.http.tenants.stream_key: the id within its
    tenant's namespace, the bare id with no keys), which is what `stream_id` names below.
    """

    def __init__(
        self,
        max_pending: int = 256,
        max_backlog: int = MAX_BACKLOG,
        observer: StreamObserver | None = None,
    ) -> None:
        self._observer = observer
        self._streams: dict[str, LiveStream] = {}
        self._opened = KeyWaits()  # ids someone waits to follow
        self._ended: dict[str, tuple[LiveStream, float]] = {}  # recently, in end order
        self._max_pending = max_pending
        self._max_backlog = max_backlog

    def open(
        self,
        configured: Configured,
        session_id: str,
        protocol: str,
        started: float,
        tenant: str = ANONYMOUS.name,
    ) -> LiveStream:
        """Publish a configured session of `tenant`; raises StreamIdTakenError if that
        tenant already has a live stream of its id (other tenants' ids do not count)."""
        stream_id = configured.stream_id or session_id
        key = stream_key(tenant, stream_id)
        if key in self._streams:
            raise StreamIdTakenError(f"stream {stream_id!r} is already live")
        stream = LiveStream(
            stream_id,
            session_id,
            protocol,
            started,
            configured,
            deque(maxlen=self._max_backlog),
            tenant=tenant,
        )
        self._streams[key] = stream
        self._opened.appeared(key)
        if self._observer is not None:
            self._observer.opened(stream)
        return stream

    async def wait_for(self, stream_id: str, timeout_s: float) -> LiveStream | None:
        """The live stream `stream_id`, waiting up to `timeout_s` for it to start.

        A follower often starts with the call (an agent-assist screen) and may be first.
        """
        if stream_id in self._streams or timeout_s <= 0:
            return self._streams.get(stream_id)
        await self._opened.wait(stream_id, timeout_s)
        return self._streams.get(stream_id)

    def publish(self, stream: LiveStream, event: SessionEvent) -> None:
        """One event of the stream: into the backlog if a final, and to every subscriber."""
        if isinstance(event, Configured):
            stream.configured = event  # options may change mid-stream
        elif isinstance(event, Final | Failed):
            stream.backlog.append(event)
            stream.finals += 1
        for sub in list(stream.subscribers):
            if not sub.put(event):
                self._drop(sub)
        if isinstance(event, Ended):
            self.close(stream)

    def close(self, stream: LiveStream, reason: ErrorEvent | None = None) -> None:
        """The session is over: unlist it, and end what its subscribers are owed.

        A session that ends without `Ended` (dropped, or a fault of ours) tells them why.
        """
        if stream.ended:
            return
        stream.ended = True
        stream.closing = (Ended(),) if reason is None else (reason, Ended())
        if self._streams.get(stream.key) is stream:
            del self._streams[stream.key]
            self._remember(stream)
            if self._observer is not None:
                self._observer.closed(stream)
        if reason is None:
            return  # `Ended` went out through publish
        for sub in list(stream.subscribers):
            if not (sub.put(reason) and sub.put(Ended())):
                self._drop(sub)

    def _remember(self, stream: LiveStream) -> None:
        now = time.monotonic()
        self._ended[stream.key] = (stream, now)
        while len(self._ended) > MAX_ENDED or (
            self._ended and next(iter(self._ended.values()))[1] < now - ENDED_GRACE_S
        ):
            del self._ended[next(iter(self._ended))]

    def subscribe_ended(self, stream_id: str) -> Subscription | None:
        """The whole of a stream that ended within `ENDED_GRACE_S`: its configuration, its
        finals and how it ended (None if it did not). For a follower on another worker
        whose hand-over crossed the stream's end; a follower here arriving late gets 404."""
        found = self._ended.get(stream_id)
        now = time.monotonic()
        if found is None or found[1] < now - ENDED_GRACE_S:
            return None
        stream = found[0]
        sub = Subscription(None, len(stream.backlog) + len(stream.closing) + 1)
        for event in (stream.configured, *stream.backlog, *stream.closing):
            sub.put(event)
        return sub

    def subscribe(self, stream_id: str) -> Subscription | None:
        """Follow a live stream from now on, after its configuration and missed finals."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return None
        sub = Subscription(stream, self._max_pending + len(stream.backlog))
        for event in (stream.configured, *stream.backlog):
            sub.put(event)
        stream.subscribers.append(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        sub.leave()

    def _drop(self, sub: Subscription) -> None:
        self.unsubscribe(sub)
        sub.dropped.set()

    def get(self, stream_id: str) -> LiveStream | None:
        return self._streams.get(stream_id)

    @property
    def waiting(self) -> int:
        """Followers waiting here for their stream to start."""
        return self._opened.waiting

    async def follow(self, stream_id: str, wait_s: float) -> Subscription | None:
        """A new subscriber of the live stream, waiting up to `wait_s` for it to start;
        None when it never started (or ended). `StreamFullError` past the most subscribers."""
        stream = await self.wait_for(stream_id, wait_s)
        if stream is None:
            return None
        if len(stream.subscribers) >= MAX_SUBSCRIBERS:
            raise StreamFullError(stream_id)
        return self.subscribe(stream_id)

    def __len__(self) -> int:
        return len(self._streams)

    def describe(self, viewer: Tenant | None = None) -> list[dict[str, object]]:
        """The live streams `viewer` may see (its own, or all for an admin or None)."""
        streams = self._streams.values()
        return [s.describe() for s in streams if viewer is None or viewer.sees(s.tenant)]


class Publisher:
    """One connection's link to the hub (and its webhook): publishes its session's events."""

    def __init__(
        self,
        hub: StreamHub,
        session_id: str,
        protocol: str,
        started: float,
        webhooks: Webhooks | None = None,
        *,
        claim: Claim | None = None,
    ) -> None:
        self._hub = hub
        self._session_id = session_id
        self._protocol = protocol
        self._started = started
        self._webhooks = webhooks
        self._claim = claim  # whose stream it is (None: the anonymous tenant's)
        self._stream: LiveStream | None = None
        self._webhook: WebhookDelivery | None = None
        self._refused = False
        # The connection's way to end its session when another worker already has the
        # stream's id (learnt a moment after the stream is listed here).
        self.on_refused: Callable[[ProtocolError], None] | None = None
        # Handed over to another worker, where it goes on: its webhook gets no `end` here.
        self.moving = False

    @property
    def key(self) -> str | None:
        """The stream's name host-wide, once it is listed."""
        return None if self._stream is None else self._stream.key

    def event(self, event: SessionEvent) -> ProtocolError | None:
        """Publish one event; the first `Configured` lists the stream (or is refused)."""
        if self._stream is None:
            if isinstance(event, Configured) and not self._refused:
                refused = self._open(event)
                self._refused = refused is not None
                return refused
            return None
        if isinstance(event, Marked):
            return None  # a protocol's own in-order reply (AudioHook's pong): not the stream's
        self._hub.publish(self._stream, event)
        webhooked = isinstance(event, Final | Failed) or (
            isinstance(event, Ended) and not self.moving
        )
        if self._webhook is not None and webhooked:
            self._webhook.send(self._webhook_body(self._stream, event))
        return None

    def _open(self, event: Configured) -> ProtocolError | None:
        tenant = ANONYMOUS if self._claim is None else self._claim.tenant
        if tenant is None:  # a protocol configured its stream before its key was checked
            return UnauthorizedError("no API key was checked for this stream")
        url = event.webhook_url
        policy = self._webhooks.policy if self._webhooks is not None else None
        if url is not None and (policy is None or not policy.allows(url)):
            return WebhookRefusedError(f"this server does not send webhooks to {url}")
        try:
            self._stream = self._hub.open(
                event, self._session_id, self._protocol, self._started, tenant.name
            )
        except StreamIdTakenError as exc:
            return exc
        self._stream.refuse = self._refused_elsewhere
        if url is not None and self._webhooks is not None:
            self._webhook = self._webhooks.open(url)
        return None

    def _refused_elsewhere(self, exc: ProtocolError) -> None:
        if self.on_refused is not None:
            self.on_refused(exc)

    def _webhook_body(self, stream: LiveStream, event: SessionEvent) -> dict[str, object]:
        return {
            "stream_id": stream.stream_id,
            "session_id": stream.session_id,
            "event": event_to_dict(event, stream.configured.channel_labels),
        }

    def close(self, reason: ErrorEvent | None) -> None:
        """The connection is over; `reason` says why when it ended without `Ended`."""
        # The refusal hooks tie connection, publisher and stream in a cycle: cut it, so
        # that a finished session is freed at once rather than at the next full GC.
        self.on_refused = None
        stream = self._stream
        if stream is None:
            return
        stream.refuse = None
        lost = None if stream.ended else reason
        self._hub.close(stream, lost)
        if self._webhook is not None:
            if lost is not None:  # the webhook too learns why the stream ended early
                for event in (lost, Ended()):
                    self._webhook.send(self._webhook_body(stream, event))
            self._webhook.finish()
