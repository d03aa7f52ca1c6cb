"""One WebSocket client: move bytes between the socket, its codec and Session, and the engine.

Generic over the wire protocol: the codec turns messages into the session's commands and
its events into messages. Three tasks share the session on the event loop (so no locks):
the reader feeds client frames in, the results task feeds engine answers in, and the
writer sends events out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from engine.client import EngineClient
from engine.types import InferenceResult
from server.live.outbox import Outbox, OutboxOverflowError
from server.live.socket_port import ClientGone, Port
from server.live.vad_pump import VadPump
from server.resume.handover import Handover, Shift
from server.resume.parked import ParkedStreams
from server.resume.stream import Resumption
from server.streams.hub import Publisher
from streaming.commands import Command
from streaming.core import StreamSession
from streaming.errors import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL_ERROR,
    CLOSE_NORMAL,
    CLOSE_POLICY_VIOLATION,
    ProtocolError,
    SessionLimitError,
)
from streaming.events import (
    Configured,
    Ended,
    ErrorEvent,
    Failed,
    Final,
    HandOff,
    SessionEvent,
)
from streaming.protocols.base import Codec, HandsOff
from streaming.protocols.v1.codec import ResumeRequest
from streaming.vad.jobs import VadJob, VadStep

log = logging.getLogger("sensestream.connection")

#: How long a dropped client gets to take its error and close frames before the socket is
#: aborted: a client that stopped reading could otherwise hold both ends' buffers forever.
DROP_GRACE_S = 5.0
#: The grace restarts while the client is still sending (it is alive, just not reading
#: yet), but never beyond this: a client that sends forever cannot hold the socket.
DROP_MAX_S = 60.0
INTERNAL_ERROR = "internal_error"
#: How long a session whose client ended its stream and left may run on for its followers.
OWED_FINALS_S = 30.0
#: How long a stream being handed over waits for the host to take it before it closes.
HAND_OVER_S = 10.0
#: A stream is handed over in a pause once this much of it has passed since the last
#: final's end: a shorter one may be a breath inside speech that is about to go on.
HAND_OVER_QUIET_MS = 500
#: RFC 6455's "Service Restart": the client should reconnect (and resume).
CLOSE_SERVICE_RESTART = 1012
#: What followers of a stream handed over are told before its `end` on this worker.
MOVED = ErrorEvent(
    "stream_moved", "the stream moved to another worker of this server: follow it again"
)


@dataclass(frozen=True, slots=True)
class Resuming:
    """How a resumable stream's connection waits for its client after a drop: where it
    parks, for how long, and the stream's side of resuming."""

    parked: ParkedStreams[Connection]
    grace_s: float
    stream: Resumption


@dataclass(frozen=True, slots=True)
class Adoption:
    """A stream this connection takes over from a retiring worker: its session's id, the
    commands of its `start`, what goes out first (`resumed` and the replay), and the map
    of its session's events onto the stream's clock and numbering."""

    session_id: str
    commands: Sequence[Command]
    first: list[SessionEvent]
    shift: Shift


@dataclass(frozen=True, slots=True)
class _Attach:
    """A resume's new socket, what goes out on it first, and the future its handler
    waits on (done when the stream is done with the socket)."""

    port: Port
    first: list[SessionEvent]
    released: asyncio.Future[None]


class ConnectionStats(Protocol):
    """Where a connection reports what happened (the app's metrics)."""

    def protocol_error(self, code: str) -> None: ...


class Connection:
    """Runs one client's session until `end` is sent or the client goes away."""

    def __init__(
        self,
        ws: Port,
        codec: Codec,
        session: StreamSession,
        engine: EngineClient,
        stats: ConnectionStats,
        *,
        max_pending_events: int = 256,
        idle_timeout_s: float = 30.0,
        publisher: Publisher | None = None,
        start_deadline_s: float | None = None,
        vad_pump: VadPump | None = None,
        resuming: Resuming | None = None,
        adoption: Adoption | None = None,
    ) -> None:
        self.ws = ws
        self.codec = codec
        self.session = session
        self.engine = engine
        self._stats = stats
        self._loop = asyncio.get_running_loop()
        # One queue for every engine session of this stream (a multichannel stream has one
        # per channel, known once it is configured: see _open_engine_sessions).
        self._results_queue: asyncio.Queue[InferenceResult] = asyncio.Queue()
        self._engine_ids: list[str] = []
        self._outbox = Outbox(max_pending_events)
        self._idle_timeout_s = idle_timeout_s
        self._publisher = publisher
        if publisher is not None:  # another worker had the stream's id first
            publisher.on_refused = self._refused_elsewhere
        self._vad_pump = vad_pump  # runs the session's VAD when its config defers it
        # A protocol whose key rides in its first message (Twilio's `start`) must send it
        # soon: an unkeyed peer may not hold a session slot by trickling other messages.
        self._start_deadline_s = start_deadline_s
        self._start_timer: asyncio.TimerHandle | None = None
        # Wakes the session when time alone gives it something to send (`wake_at`).
        self._wake: asyncio.TimerHandle | None = None
        self._configured = False
        self._ended = asyncio.Event()  # `Ended` was queued: followers have had the whole stream
        self._settled = asyncio.Event()  # nothing more will be published: ended or dropped
        self._lost: ErrorEvent = ErrorEvent(
            "session_closed", "the stream's client went away before the stream ended"
        )
        self._going_away = False
        # The first client error that ends the stream: its close code and reason say so.
        self._ending_error: ProtocolError | None = None
        self._done = asyncio.Event()
        self._draining = asyncio.Event()  # set by drain(): no more waiting on the client
        self._tasks: list[asyncio.Task[None]] = []
        self._finishing = False  # run() is cleaning up: nothing more is fed or dropped
        # Set once the session is dropped (a client too slow to read, or a fault of ours).
        self._dropping: asyncio.Task[None] | None = None
        self._drop_grace: asyncio.Timeout | None = None  # while a drop waits for the client
        self._drop_started = 0.0
        # Set after every step of the session: what may have let it accept audio again.
        self._stepped = asyncio.Event()
        self._resuming = resuming
        self._sample_rate = 16000  # the stream's, once configured (acknowledgements count it)
        # While parked: a resume's new socket, and what goes out on it before the outbox.
        self._attach: asyncio.Future[_Attach] | None = None
        self._first: list[SessionEvent] = []  # sent before the outbox (a resume's replay)
        self._released: asyncio.Future[None] = self._loop.create_future()  # the port's use
        self._parked = asyncio.Event()  # set while parked (a takeover waits for it)
        self._adoption = adoption
        # Handing the stream over (a retiring worker): set once every final is handed to
        # the socket, then the socket waits for `moved` to close.
        self._handing_over = False
        self._all_handed = asyncio.Event()
        self._moved: asyncio.Future[None] = self._loop.create_future()

    async def run(self) -> None:
        """Serve until the session ends or the client disconnects (and, for a resumable
        stream, does not come back in its grace); always clean up."""
        self._tasks = [
            asyncio.create_task(self._read(), name="read"),
            asyncio.create_task(self._results(), name="results"),
            asyncio.create_task(self._write(), name="write"),
        ]
        self._step(partial(self._feed, self.codec.opening()))  # e.g. a session.created
        if self._adoption is not None:
            self._first = list(self._adoption.first)
            self._step(partial(self._feed, self._adoption.commands))
        if self._start_deadline_s is not None and not self._configured:
            self._start_timer = self._loop.call_later(self._start_deadline_s, self._no_start)
        try:
            while await self._serve():
                pass
        finally:
            await self._clean_up()

    async def _serve(self) -> bool:
        """Serve the current socket; True when a resume brought a new one to serve."""
        read, _, write = self._tasks
        # The writer ends after `end`; the reader ends early if the client goes away.
        await asyncio.wait([read, write], return_when=asyncio.FIRST_COMPLETED)
        if self._may_park() and await self._park():
            return True
        if not write.done() and not self._client_gone(read) and self._dropping is None:
            await asyncio.wait([write])  # a drop may cancel it: wait, never raise
        elif self._client_gone(read) and self.session.stopped and self._publisher is not None:
            await self._finish_for_followers()
        if self._dropping is not None:
            await self._dropping
        return False

    async def _clean_up(self) -> None:
        self._finishing = True
        if self._start_timer is not None:
            self._start_timer.cancel()
        if self._wake is not None:
            self._wake.cancel()
        for task in self._tasks:
            task.cancel()
        # Released before the await: a second cancellation there must not leave the
        # stream listed or its engine sessions open.
        self._cancel_engine_sessions()
        if self._publisher is not None:
            if not self._ended.is_set():
                self._publish_held()
            self._publisher.close(None if self._ended.is_set() else self._lost)
        try:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            # Cancelled tasks keep their CancelledError, whose traceback holds frames
            # that hold this connection: drop them, or sessions linger until a full GC.
            self._tasks.clear()
            if not self._released.done():
                self._released.set_result(None)
            self._done.set()

    # ---- resuming ---------------------------------------------------------------------

    def _may_park(self) -> bool:
        """The client's connection was lost mid-stream (it did not close saying it is
        done), and the stream may wait for it to come back."""
        return (
            self._resuming is not None
            and self._resuming.stream.resumable
            and self.ws.closed
            and not self.ws.left
            and self._configured
            and self._dropping is None
            and self._ending_error is None
            and not self._going_away
            and not self._ended.is_set()
        )

    async def _park(self) -> bool:
        """Wait out the grace for a resume; True with its socket attached."""
        resuming = self._resuming
        if resuming is None:
            return False
        read, _, write = self._tasks
        # The socket is gone: what the writer would send waits in the outbox, and the
        # reader may be waiting for room to read a close it has not seen.
        for task in (read, write):
            task.cancel()
        await asyncio.gather(read, write, return_exceptions=True)
        await self.ws.settle()
        if self.ws.left:  # the client closed saying it is done: nothing to wait for
            return False
        self._attach = self._loop.create_future()
        draining = asyncio.ensure_future(self._draining.wait())
        session_id = self.session.session_id
        resuming.parked.park(session_id, self)
        self._parked.set()
        log.info("session %s: client gone, waiting %g s for it", session_id, resuming.grace_s)
        # A stream that ends meanwhile (its client had sent `stop`) waits no more: its
        # followers have had it all.
        settled = asyncio.ensure_future(self._settled.wait())
        waiters: list[asyncio.Future[Any]] = [self._attach, draining, settled]
        try:
            await asyncio.wait(
                waiters, timeout=resuming.grace_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            draining.cancel()
            settled.cancel()
            self._parked.clear()
            resuming.parked.leave(session_id, self)
        attach, self._attach = self._attach, None
        if not attach.done():
            attach.cancel()
            return False
        self._reattach(attach.result())
        return True

    async def let_go(self, timeout_s: float) -> bool:
        """A resume came while this stream still holds a socket (a silent network drop is
        not seen until the socket times out): drop that socket now and wait for the stream
        to park; whether it did."""
        if self._resuming is None or self._finishing or self._dropping is not None:
            return False
        if not self._parked.is_set():
            self.ws.abort()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._parked.wait()
        return self._parked.is_set()

    def resume(self, port: Port, request: ResumeRequest) -> asyncio.Future[None]:
        """Take a parked stream up on `port` (see `Resumption.resume`; raises
        ResumeRefusedError for a gap). The future is done when the stream is done with it."""
        resuming, attach = self._resuming, self._attach
        if resuming is None or attach is None or attach.done():
            raise RuntimeError("resume() of a stream that is not parked")
        first = resuming.stream.resume(request, stopped=self.session.stopped)
        released: asyncio.Future[None] = self._loop.create_future()
        attach.set_result(_Attach(port, first, released))
        return released

    def _reattach(self, attach: _Attach) -> None:
        if not self._released.done():
            self._released.set_result(None)  # the old socket's handler may finish
        self._released = attach.released
        self.ws = attach.port
        self._first = attach.first
        log.info("session %s: resumed", self.session.session_id)
        _, results, _ = self._tasks
        self._tasks = [
            asyncio.create_task(self._read(), name="read"),
            results,
            asyncio.create_task(self._write(), name="write"),
        ]
        self._stepped.set()

    async def _finish_for_followers(self) -> None:
        """The client ended its stream and left at once (Twilio closes right after `stop`):
        its followers are still owed the finals, so the session runs on until `Ended`."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(OWED_FINALS_S):
                await self._settled.wait()

    async def drain(self, hand_off_s: float = 0.0) -> None:
        """Graceful shutdown: finish the utterance in flight, send owed finals, close 1001.
        A session whose protocol can move is first asked to go on elsewhere, and given
        `hand_off_s` to close this connection itself."""
        if hand_off_s > 0 and await self._handed_off(hand_off_s):
            return
        self._going_away = True
        self._draining.set()
        self._stepped.set()
        if not self._finishing:  # a session that is already ending has nothing to drain
            self._step(lambda: self.session.end_of_stream(self._loop.time()))
        await self._done.wait()

    def can_hand_over(self) -> bool:
        """A stream another worker can go on with: resumable, one channel, still taking
        audio (one whose client sent `stop` just finishes)."""
        resuming = self._resuming
        return (
            resuming is not None
            and resuming.stream.resumable
            and not resuming.stream.channels
            and not self.session.stopped
            and not (self._finishing or self._going_away or self._dropping is not None)
            and self._ending_error is None
        )

    @property
    def moving(self) -> bool:
        """Being handed over to another worker (a resume meanwhile waits for that)."""
        return self._handing_over

    @property
    def stream_key(self) -> str | None:
        """The stream's name host-wide, once it is listed."""
        return None if self._publisher is None else self._publisher.key

    async def hand_over(self, key: str, pause_s: float) -> Handover | None:
        """A retiring worker's drain of a stream that moves: at the next pause between
        utterances (within `pause_s`; else the utterance in flight is dropped unfinished,
        for the next worker to hear whole), every final goes out (or waits for a parked
        client), then the stream as it is left; None when it could not be (it ended
        meanwhile). The caller hands it on, then calls `moved`."""
        resuming = self._resuming
        if resuming is None or not self.can_hand_over():
            return None
        await self._until_pause(resuming.stream, pause_s)
        if not self.can_hand_over():
            return None
        self._handing_over = True
        if self._publisher is not None:
            self._publisher.moving = True
        self._draining.set()  # a parked stream waits for its client no more
        self._stepped.set()
        # With a final still in the engine (a stuck engine) the utterance in flight ends
        # here instead: a hand-over that then fails to settle drains, losing a dropped one.
        end = self.session.end_of_stream if self.session.owed_finals else self.session.hand_over
        self._step(lambda: end(self._loop.time()))
        ended = asyncio.ensure_future(self._ended.wait())
        handed = asyncio.ensure_future(self._all_handed.wait())
        try:
            async with asyncio.timeout(HAND_OVER_S):
                await ended
                if not self.ws.closed and not self._tasks[2].done():
                    await asyncio.wait(
                        [handed, self._tasks[2]], return_when=asyncio.FIRST_COMPLETED
                    )
        except TimeoutError:  # not settled in time: it ends here, as at a drain
            self._handing_over = False
            if self._publisher is not None:
                self._publisher.moving = False
            return None
        finally:
            ended.cancel()
            handed.cancel()
        while (event := self._outbox.take_nowait()) is not None:  # a parked client's
            resuming.stream.handed(event)
        dropped = self.session.dropped_utt
        if dropped is not None and self._adoption is not None:  # numbered as the stream's
            dropped = self._adoption.shift.stream_utt_id(dropped)
        handover = resuming.stream.handover(
            self.session.session_id, key, self._sample_rate, dropped
        )
        log.info(
            "session %s: handed over at %d ms%s",
            handover.session_id,
            handover.clock_ms,
            "" if dropped is None else f", utterance {dropped} to be heard again whole",
        )
        return handover

    async def done(self) -> None:
        """Wait until the connection has finished."""
        await self._done.wait()

    async def _until_pause(self, stream: Resumption, wait_s: float) -> None:
        """Let a stream that is taking audio reach a pause between utterances (at most
        `wait_s`) that has lasted `HAND_OVER_QUIET_MS` since where the stream would go on
        (the last final's end): the next worker's VAD, starting there, hears the pause
        whole and finds the next utterance where this one would have. Failing that, wait
        (at most `HAND_OVER_S`) for the finals in the engine, so that the utterance in
        flight can be dropped (`Session.hand_over`) with every earlier one decided."""

        def quiet() -> bool:
            since = stream.handover_ms(self._sample_rate)
            return self.session.in_pause and self.session.judged_ms - since >= HAND_OVER_QUIET_MS

        def settled() -> bool:
            return quiet() or self._parked.is_set() or self._finishing

        if not await self._until(settled, wait_s):
            await self._until(lambda: settled() or not self.session.owed_finals, HAND_OVER_S)

    async def _until(self, ready: Callable[[], bool], wait_s: float) -> bool:
        """Wait (at most `wait_s`) for the session's steps to make `ready()` true."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                while not ready():
                    self._stepped.clear()
                    await self._stepped.wait()
        return ready()

    def moved(self) -> None:
        """The stream is handed over: the client is told to resume."""
        if not self._moved.done():
            self._moved.set_result(None)

    async def _handed_off(self, wait_s: float) -> bool:
        """Ask the client to go on with the session on a new connection; whether it closed
        this one within `wait_s` (its `close` is answered after the owed finals)."""
        if not isinstance(self.codec, HandsOff) or not self.codec.can_hand_off:
            return False
        if self._finishing or self._dropping is not None or self.ws.closed:
            return False
        self._queue(HandOff())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                await self._done.wait()
        return self._done.is_set()

    def _client_gone(self, reader: asyncio.Task[None]) -> bool:
        return reader.done() and self.ws.closed

    async def _read(self) -> None:
        while True:
            await self._until_accepting()
            # Idle clients are timed out; once stopped, the client only waits for finals.
            idle = self.session.stopped or self._dropping is not None
            timeout = None if idle else self._idle_timeout_s
            try:
                message = await asyncio.wait_for(self.ws.recv(), timeout)
            except TimeoutError:
                self._step(partial(self._fail, SessionLimitError(f"no audio for {timeout:.0f} s")))
                return
            except ClientGone:
                return
            if self._going_away or self._handing_over or self._dropping is not None:
                # Dropped unread and undecoded (a stream handed over goes on from the
                # audio taken before its cut, which the client resends): a client
                # blocked sending must still get to read its error and close, so the
                # socket keeps draining until it closes.
                self._extend_drop_grace()
                continue
            if isinstance(message, bytes) and self._resuming is not None:
                message = self._resuming.stream.trim(message)
                if not message:
                    continue  # resent audio the stream already has
            ok = self._step(partial(self._receive, message))
            if self._vad_pump is not None:
                self._vad_pump.notify(self)
            if not ok and self._dropping is None:
                return  # a client error: the session sends what it owes, then closes

    async def _until_accepting(self) -> None:
        """Backpressure: the client's frames stay in its socket, so TCP slows the sender,
        until its pace allows the next (a timer to the bucket's deadline) and its session
        can take more audio (woken by each step that may have made room)."""
        while not self._reading_freely():
            delay = self.session.resume_at - self._loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            if self.session.accepting:
                return
            self._stepped.clear()
            await self._stepped.wait()

    def _reading_freely(self) -> bool:
        """Nothing more will be decoded: frames are read only to see the client close."""
        return self.session.stopped or self._going_away or self._dropping is not None

    def take_vad_job(self) -> VadJob | None:
        """The session's VAD work for the pump (none once the session is going)."""
        if self._dropping is not None or self._finishing:
            return None
        return self.session.take_vad_job()

    def vad_done(self, job: VadJob, outcome: tuple[VadStep, ...] | Exception) -> None:
        """The pump's verdicts: apply them, then every command that waited for them."""
        if isinstance(outcome, Exception):
            if self._dropping is None and not self._finishing:
                self._crash(outcome)
            return
        now = self._loop.time()
        self._step(partial(self.session.apply_vad, job, outcome, now))
        while self.session.has_deferred and self._dropping is None and not self._finishing:
            self._step(partial(self.session.resume, now))
        if self._vad_pump is not None:
            self._vad_pump.notify(self)  # audio that came meanwhile

    def _receive(self, message: str | bytes) -> None:
        self._feed(self.codec.decode(message))
        if self._resuming is not None and self._configured:
            acked = self._resuming.stream.ack(self._sample_rate, self.session.settled_ms)
            if acked is not None:
                self._queue(acked)

    def _queue(self, event: SessionEvent) -> None:
        """Queue an event of the connection's own (not the session's) for the client."""
        try:
            self._outbox.put(event)
        except OutboxOverflowError as exc:  # a client that does not read, as in _pump
            self._overflowed(exc)

    def _feed(self, commands: Sequence[Command]) -> None:
        now = self._loop.time()
        for command in commands:
            self.session.handle(command, now)

    async def _results(self) -> None:
        while True:
            result = await self._results_queue.get()
            self._step(partial(self.session.receive_result, result, self._loop.time()))

    def _step(self, feed: Callable[[], object]) -> bool:
        """Run one step of the session core, then pump: the one boundary for its failures.

        A client's bad input (`ProtocolError`) gets its error event, owed finals and close
        code from the session itself. Anything else is a fault of ours: that session alone
        ends with `internal_error` and 1011. Returns whether the client should still be read.
        """
        if self._dropping is not None or self._finishing:
            return False
        self._stepped.set()  # the reader rechecks whether the session takes audio again
        try:
            try:
                feed()
            except ProtocolError as exc:
                if not self.codec.is_fatal(exc):
                    self._stats.protocol_error(exc.code)
                    self.session.reject(exc)
                    self._pump()
                    return True
                self._fail(exc)
                self._pump()
                return False
            self._pump()
        except Exception as exc:  # noqa: BLE001 - the session boundary: any fault ends it alone
            self._crash(exc)
            return False
        return self._ending_error is None  # publishing can fail it (a taken stream id)

    def _refused_elsewhere(self, exc: ProtocolError) -> None:
        self._step(partial(self._fail, exc))

    def _fail(self, exc: ProtocolError) -> None:
        """Report a client error; the session still delivers the finals it owes."""
        self._stats.protocol_error(exc.code)
        log.info("session %s: %s: %s", self.session.session_id, exc.code, exc)
        if self._ending_error is None:
            self._ending_error = exc
        self.session.abort(exc, self._loop.time())

    def _crash(self, exc: Exception) -> None:
        log.error(
            "session %s: internal error, session ended: %s: %s",
            self.session.session_id,
            type(exc).__name__,
            exc,
        )
        log.debug("session %s: internal error", self.session.session_id, exc_info=exc)
        self._stats.protocol_error(INTERNAL_ERROR)
        self._start_drop(
            INTERNAL_ERROR, "internal server error: this session has ended", CLOSE_INTERNAL_ERROR
        )

    async def _write(self) -> None:
        try:
            while True:
                event = self._first.pop(0) if self._first else await self._outbox.get()
                if self._resuming is not None:
                    self._resuming.stream.handed(event)
                if isinstance(event, Ended) and self._handing_over:
                    await self._close_when_moved()
                    return
                for frame in self.codec.encode(event):
                    await self.ws.send(frame)
                if isinstance(event, Ended):
                    await self._let_client_close()
                    error = self._ending_error
                    await self.ws.close(self._close_code(), error.code if error else None)
                    return
        except ClientGone:
            return

    async def _close_when_moved(self) -> None:
        """Every final is handed out: once the stream is handed over, the client is told
        to resume (close 1012), which takes it to the worker that goes on with it."""
        self._all_handed.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(HAND_OVER_S):
                await asyncio.shield(self._moved)
        await self.ws.close(CLOSE_SERVICE_RESTART, MOVED.code)

    async def _let_client_close(self) -> None:
        """After a normal end, give the client the codec's grace to close first.

        Some protocols' clients (FunASR's) close after the last message and fail if the
        server has closed first. The reader ends when the client closes; a drain cuts the
        wait short.
        """
        grace = self.codec.end_grace_s
        if grace <= 0 or self._ending_error is not None or self._going_away:
            return
        draining = asyncio.ensure_future(self._draining.wait())
        try:
            await asyncio.wait(
                [self._tasks[0], draining], timeout=grace, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            draining.cancel()

    def _close_code(self) -> int:
        if self._ending_error is not None:
            return self.codec.close_code(self._ending_error)
        return CLOSE_GOING_AWAY if self._going_away else CLOSE_NORMAL

    def _pump(self) -> None:
        """Hand the session's new requests to the engine and its events to the outbox."""
        if self._dropping is not None:
            return  # the session is being dropped: nothing more is decoded or queued
        self._submit_requests()
        try:
            # A refused publication aborts the session, which may add events and requests.
            while events := self.session.events_to_send():
                if self._adoption is not None:
                    events = [self._adoption.shift(e) for e in events]
                for event in events:
                    if isinstance(event, Ended) and self._handing_over:
                        self._publish(MOVED)  # followers follow it again where it goes on
                    # A client gone after `stop` reads nothing more; one gone mid-stream
                    # may come back for what it missed: its finals, errors and end.
                    owed = isinstance(event, Final | Failed | ErrorEvent | Ended)
                    if not self.ws.closed or (self._resumable_now and owed):
                        self._outbox.put(event)
                    self._publish(event)
                self._submit_requests()
            self._arm_wake()
        except OutboxOverflowError as exc:
            self._overflowed(exc)

    def _overflowed(self, exc: OutboxOverflowError) -> None:
        self._stats.protocol_error(exc.code)
        log.warning("session %s: %s", self.session.session_id, exc)
        self._start_drop(exc.code, str(exc), CLOSE_POLICY_VIOLATION)

    def _arm_wake(self) -> None:
        """A timer to the session's `wake_at`: finals that redaction holds go out on time
        for a client that has stopped sending (and is waiting for them)."""
        at = self.session.wake_at
        if self._wake is not None:
            # While someone speaks the due time moves on with every frame: a timer that
            # fires early finds nothing due, and its step arms the next one.
            if at is not None and self._wake.when() <= at:
                return
            self._wake.cancel()
            self._wake = None
        if at is not None:
            self._wake = self._loop.call_at(at, self._woken)

    def _woken(self) -> None:
        self._wake = None
        self._step(partial(self.session.tick, self._loop.time()))

    def _submit_requests(self) -> None:
        self._open_engine_sessions()
        for request in self.session.requests_to_submit():
            self.engine.submit(request)

    def _no_start(self) -> None:
        if not self._configured:
            limit = f"no start within {self._start_deadline_s:g} s of connecting"
            self._step(partial(self._fail, SessionLimitError(limit)))

    def _publish_held(self) -> None:
        """A stream that ends without `Ended`: what redaction held (a final that may have
        begun a card) still reaches its followers and webhook, redacted, before `lost`."""
        publisher = self._publisher
        if publisher is None:
            return
        try:
            held = self.session.release_held()
        except Exception as exc:  # noqa: BLE001 - a session that crashed: its lost event goes on
            log.error("session %s: held finals not released: %s", self.session.session_id, exc)
            return
        for event in held:
            publisher.event(event)

    @property
    def _resumable_now(self) -> bool:
        return self._resuming is not None and self._resuming.stream.resumable

    def _publish(self, event: SessionEvent) -> None:
        """Followers get every event the client gets; a taken stream id ends the session."""
        if isinstance(event, Configured):
            self._configured = True
            self._sample_rate = event.audio.sample_rate
            if self._resuming is not None:
                self._resuming.stream.configured(event)
        if isinstance(event, Ended):
            self._ended.set()
            self._settled.set()
        if self._publisher is not None:
            refused = self._publisher.event(event)
            if refused is not None:
                self._fail(refused)

    def _open_engine_sessions(self) -> None:
        for engine_id in self.session.engine_ids:
            if engine_id not in self._engine_ids:
                self.engine.open_session(engine_id, self._results_queue)
                self._engine_ids.append(engine_id)

    def _cancel_engine_sessions(self) -> None:
        for engine_id in self._engine_ids:
            self.engine.cancel(engine_id)
        self._engine_ids.clear()

    def _start_drop(self, code: str, message: str, close_code: int) -> None:
        """Stop reading, decoding and queueing for this session at once, then close it."""
        if self._dropping is not None or self._finishing or not self._tasks:
            return
        self._cancel_engine_sessions()
        _reader, results, write = self._tasks
        current = asyncio.current_task()
        for task in (results, write):  # the reader stays, discarding (see _read)
            if task is not current:
                task.cancel()
        self._lost = ErrorEvent(code, message)
        self._settled.set()
        self._stepped.set()
        self._dropping = self._loop.create_task(self._drop(self._lost, close_code), name="drop")

    def _extend_drop_grace(self) -> None:
        grace = self._drop_grace
        if grace is not None:
            deadline = min(self._loop.time() + DROP_GRACE_S, self._drop_started + DROP_MAX_S)
            grace.reschedule(deadline)

    async def _drop(self, event: ErrorEvent, close_code: int) -> None:
        """Say why and close if the client takes it in time; else abort the socket.

        The server writes only when the client's socket has room, so the error waits for
        a client that is still sending to start reading: its grace runs from its last frame.
        """
        self._drop_started = self._loop.time()
        try:
            async with asyncio.timeout(DROP_GRACE_S) as grace:
                self._drop_grace = grace
                for frame in self.codec.encode(event):
                    await self.ws.send(frame)
                await self.ws.close(close_code, event.code)
        except (TimeoutError, ClientGone):
            self.ws.abort()
        finally:
            self._drop_grace = None  # an exited timeout cannot be rescheduled
