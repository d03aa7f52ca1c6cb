"""Resuming at the WebSocket route: a v1 connection whose first message is a `start` with
`resume` takes a parked stream up instead of opening a new one.

The app asks `take_up` before it admits a new session; anything else the first message
says goes back to the socket, for the new session's codec to read as usual.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from server.host.messages import MOVING, NOT_WAITING, TakeUp
from server.http.tenants import Claim, stream_key
from server.live.connection import Adoption, Connection, Resuming
from server.live.socket_port import ClientGone, Port, SocketPort
from server.resume import tokens
from server.resume.handover import Handover, Shift
from server.resume.parked import ParkedStreams
from server.resume.pipes import ClientEnd
from server.resume.stream import Resumption
from server.resume.tokens import ResumeClaim, ResumeRefusal
from streaming.errors import ProtocolError, ResumeRefusedError
from streaming.events import ErrorEvent
from streaming.protocols.base import Codec
from streaming.protocols.v1.codec import (
    ResumeRequest,
    StartMessage,
    V1Codec,
    parse_client_text,
)

log = logging.getLogger("sensestream.resume")


@dataclass(frozen=True, slots=True)
class ResumePolicy:
    """Whether and how this worker's v1 streams resume: the grace a dropped stream waits
    (0: streams end when their client goes, as before), the longest a stream may live
    (its token's life, with the grace), and the host's token secret."""

    grace_s: float
    max_session_s: float
    secret: bytes

    @property
    def on(self) -> bool:
        return self.grace_s > 0


#: How long a resume waits for a stream that still held a socket to let go of it.
LET_GO_S = 5.0
#: A resuming client sends its `start` at once: a new connection is looked at this long
#: (holding no session place meanwhile) for one, then it is a new session's.
RESUME_PEEK_S = 2.0


class ResumeHost(Protocol):
    """What a worker of several asks its supervisor about resumes (its link)."""

    async def take_up_elsewhere(
        self, port: SocketPort, key: str, session_id: str, request: ResumeRequest
    ) -> ClientEnd | Handover | str:
        """The end that pipes `port` to the stream's worker, the stream itself (handed
        over by a retiring worker), or why not."""
        ...

    async def hand_over(self, handover: Handover, wait_s: float) -> bool:
        """Keep a stream for the worker its client resumes on."""
        ...


@dataclass(frozen=True, slots=True)
class Adopted:
    """A stream handed over to this worker: what its connection resumes and adopts."""

    resuming: Resuming
    adoption: Adoption


#: Serves a stream handed over to this worker on the resume's connection (the app's):
#: (port, codec, claim, the stream) → done when the stream is done with the port.
Adopter = Callable[[SocketPort, V1Codec, Claim, Adopted], Awaitable[None]]


class Resumes:
    """One worker's resumable streams: what each new stream is given, and resumes.
    `live` finds a stream by its session id while it still holds a socket; `host` (a
    worker of several) finds the others' streams."""

    def __init__(
        self,
        policy: ResumePolicy,
        live: Callable[[str], Connection | None],
        host: ResumeHost | None = None,
    ) -> None:
        self.policy = policy
        self.parked: ParkedStreams[Connection] = ParkedStreams()
        self._live = live
        self.host = host

    def resuming(self, codec: Codec, claim: Claim, session_id: str) -> Resuming | None:
        """What a new stream keeps for resuming (None when resuming is off, or for a
        protocol other than v1)."""
        if not self.policy.on or not isinstance(codec, V1Codec):
            return None
        policy, tenant = self.policy, _tenant(claim)

        def token_for(stream_id: str) -> str:
            now = int(time.time())
            expires = now + int(policy.max_session_s + policy.grace_s)
            claim = ResumeClaim(tenant, stream_id, session_id, now, expires)
            return tokens.issue(policy.secret, claim)

        return Resuming(self.parked, policy.grace_s, Resumption(codec, token_for))

    async def resume_request(self, port: SocketPort, codec: Codec) -> ResumeRequest | None:
        """The resume a new v1 connection's first message asks for, if that comes within
        `RESUME_PEEK_S` and is one (then it is taken from the socket); None leaves any
        other first message for the session's codec. Raises ClientGone."""
        if not self.policy.on or not isinstance(codec, V1Codec):
            return None
        first = await port.peek(RESUME_PEEK_S)
        request = None if first is None else _resume_request(first)
        if request is not None:
            await port.recv()  # taken: it is this resume's
        return request

    async def take_up(
        self,
        port: SocketPort,
        codec: V1Codec,
        claim: Claim,
        request: ResumeRequest,
        adopt: Adopter,
    ) -> None:
        """Serve a resume here until the stream is done with this socket, or refuse it.
        A stream a retiring worker handed over is served by `adopt`."""
        try:
            released = await self._resume(port, request, codec, claim, adopt)
        except ResumeRefusedError as exc:
            log.info("resume refused: %s", exc)
            await _refuse(port, codec, exc)
            return
        await released

    async def _resume(
        self,
        port: SocketPort,
        request: ResumeRequest,
        codec: V1Codec,
        claim: Claim,
        adopt: Adopter,
    ) -> Awaitable[None]:
        tenant = _tenant(claim)
        verdict = tokens.verify(self.policy.secret, request.token, tenant, time.time())
        if isinstance(verdict, ResumeRefusal):
            raise ResumeRefusedError(str(verdict))
        if await self._has(verdict.session_id):
            return self._resume_here(port, verdict.session_id, request)
        if self.host is None:
            raise ResumeRefusedError(NOT_WAITING)
        key = stream_key(verdict.tenant, verdict.stream_id)
        end = await self.host.take_up_elsewhere(port, key, verdict.session_id, request)
        if isinstance(end, str):
            raise ResumeRefusedError(end)
        if isinstance(end, Handover):
            return await self._adopted(port, request, codec, claim, handover=end, adopt=adopt)
        return end.run()

    async def _adopted(
        self,
        port: SocketPort,
        request: ResumeRequest,
        codec: V1Codec,
        claim: Claim,
        *,
        handover: Handover,
        adopt: Adopter,
    ) -> Awaitable[None]:
        """Go on here with a stream a retiring worker handed over; a resume refused (its
        audio would leave a gap) leaves the stream for a better one."""
        resuming = self.resuming(codec, claim, handover.session_id)
        if resuming is None:
            raise ResumeRefusedError(NOT_WAITING)
        try:
            commands = codec.adopt(handover.start_text, handover.samples)
            resuming.stream.adopted(handover)
            first = resuming.stream.resume(request, stopped=False)
        except ProtocolError as exc:  # a gap; or its start is refused here (new limits)
            if self.host is not None:  # left for a better resume, or a grace's end
                await self.host.hand_over(handover, self.policy.grace_s)
            raise ResumeRefusedError(str(exc)) from exc
        shift = Shift(handover.next_utt_id, handover.clock_ms)
        adoption = Adoption(handover.session_id, commands, first, shift)
        return adopt(port, codec, claim, Adopted(resuming, adoption))

    async def take_up_piped(self, port: Port, body: TakeUp) -> str | None:
        """A resume that landed on another worker, for a stream here (its token checked
        there): None once the stream serves `port`, else why not."""
        live = self._live(body.session_id)
        if live is not None and live.moving:
            return MOVING
        if not await self._has(body.session_id):
            return NOT_WAITING
        try:
            released = self._resume_here(port, body.session_id, body.request)
        except ResumeRefusedError as exc:
            return str(exc)
        # Done with the pipe (the stream ended, or parks again): the other end hangs up.
        released.add_done_callback(lambda _: port.abort())
        return None

    async def _has(self, session_id: str) -> bool:
        """Whether the stream is parked here, once a live one has let its socket go."""
        if self.parked.has(session_id):
            return True
        live = self._live(session_id)
        if live is None or live.moving:  # a stream being handed over is nobody's to take
            return False
        return await live.let_go(LET_GO_S) and self.parked.has(session_id)

    def _resume_here(
        self, port: Port, session_id: str, request: ResumeRequest
    ) -> asyncio.Future[None]:
        conn = self.parked.take(session_id)
        if conn is None:  # its grace ran out just now
            raise ResumeRefusedError(NOT_WAITING)
        try:
            return conn.resume(port, request)
        except ResumeRefusedError:
            self.parked.park(session_id, conn)  # unharmed: it waits on
            raise


def _tenant(claim: Claim) -> str:
    """The tenant a connection speaks for ("" on a server without keys)."""
    return claim.tenant.name if claim.tenant is not None else ""


def _resume_request(message: str | bytes) -> ResumeRequest | None:
    """The resume a first message asks for, if it is a well-formed start that resumes."""
    if not isinstance(message, str) or '"resume"' not in message:
        return None
    try:
        parsed = parse_client_text(message)
    except ProtocolError:
        return None  # the new session's codec says what is wrong with it
    return parsed.resume if isinstance(parsed, StartMessage) else None


async def _refuse(port: SocketPort, codec: V1Codec, error: ProtocolError) -> None:
    try:
        for frame in codec.encode(ErrorEvent(error.code, str(error))):
            await port.send(frame)
    except ClientGone:
        return
    await port.close(error.close_code, error.code)
