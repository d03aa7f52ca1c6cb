"""A worker's drain: every open connection finished, or handed on, within one deadline.

At shutdown each connection sends what it owes and closes; a session whose protocol can
move (AudioHook) is first asked to go on elsewhere. A worker a reload replaces (retiring)
also hands each resumable v1 stream over: the stream's state goes to the supervisor,
whose worker the client resumes on goes on with it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from server.live.connection import Connection
from server.resume.handover import Handover

log = logging.getLogger("sensestream.drain")

#: Keeps a stream handed over for the worker its client resumes on (a worker's link):
#: (handover, how long) → whether it is kept.
KeepHandover = Callable[[Handover, float], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class DrainPlan:
    """How long the whole drain may take, how long a movable session is given to move,
    and, when retiring, where streams are handed over and how long they are kept."""

    timeout_s: float
    hand_off_s: float
    keep: KeepHandover | None = None
    grace_s: float = 0.0


async def drain_all(connections: Iterable[Connection], plan: DrainPlan) -> None:
    """Finish (or hand on) every connection; those left at the deadline are logged."""
    drains = [asyncio.ensure_future(_drain_one(conn, plan)) for conn in connections]
    if not drains:
        return
    _, pending = await asyncio.wait(drains, timeout=plan.timeout_s)
    if pending:
        log.warning("%d session(s) did not finish within the shutdown timeout", len(pending))


async def _drain_one(conn: Connection, plan: DrainPlan) -> None:
    key = conn.stream_key
    if plan.keep is None or key is None or not conn.can_hand_over():
        await conn.drain(plan.hand_off_s)
        return
    handover = await conn.hand_over(key, plan.hand_off_s)
    if handover is None:  # it ended meanwhile, or could not settle in time
        await conn.drain()
        return
    if not await plan.keep(handover, plan.grace_s):
        log.warning("session %s: the supervisor did not keep its stream", handover.session_id)
    conn.moved()
    await conn.done()
