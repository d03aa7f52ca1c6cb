"""EngineReplica: one engine serving the sessions of many gateways (a remote replica's body).

Nothing here knows Ray: the Serve deployment wraps it, and tests drive it directly. Each
gateway's sessions get their own names on the engine, so two gateways may use the same
session id, and their own result queue, drained by that gateway's `collect` calls. A
gateway not heard from for `lease_s` is presumed gone: its sessions are cancelled.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

from engine.client import EngineClient
from engine.remote.messages import Collected, Hello, Tick
from engine.serving.builder import EngineReport
from engine.types import InferenceResult

#: Longer than any wait a gateway asks of `collect`, so a live gateway always renews.
DEFAULT_LEASE_S = 60.0


@dataclass
class _Gateway:
    prefix: str
    seen: float
    results: asyncio.Queue[InferenceResult] = field(default_factory=asyncio.Queue)
    sessions: set[str] = field(default_factory=set)


class EngineReplica:
    """Takes ticks of requests from gateways and hands each gateway its own results."""

    def __init__(
        self,
        engine: EngineClient,
        replica_id: str,
        report: EngineReport,
        *,
        lease_s: float = DEFAULT_LEASE_S,
    ) -> None:
        self.engine = engine
        self.replica_id = replica_id
        self.report = report
        self._lease_s = lease_s
        self._gateways: dict[str, _Gateway] = {}

    def hello(self) -> Hello:
        return Hello(self.replica_id, self.report)

    @property
    def gateways(self) -> tuple[str, ...]:
        return tuple(self._gateways)

    def tick(self, tick: Tick, now: float) -> None:
        """Apply a gateway's cancellations, then submit its requests (`now`: the loop's
        clock). A tick holds no request of a session it cancels unless the id was opened
        again after the cancel, so this order is right either way."""
        gateway = self._renew(tick.gateway, now)
        for session_id in tick.cancels:
            scoped = gateway.prefix + session_id
            if scoped in gateway.sessions:
                gateway.sessions.discard(scoped)
                self.engine.cancel(scoped)
        for request in tick.requests:
            scoped = gateway.prefix + request.session_id
            if scoped not in gateway.sessions:
                self.engine.open_session(scoped, gateway.results)
                gateway.sessions.add(scoped)
            # The engine's clock is this host's: the gateway's `arrival` means nothing here.
            self.engine.submit(replace(request, session_id=scoped, arrival=now))

    async def collect(self, gateway_id: str, wait_s: float) -> Collected:
        """A gateway's results so far, waiting up to `wait_s` for the first one."""
        loop = asyncio.get_running_loop()
        gateway = self._renew(gateway_id, loop.time())
        queue = gateway.results
        first = []
        if queue.empty() and wait_s > 0:
            getter = loop.create_task(queue.get())
            try:
                done, _ = await asyncio.wait({getter}, timeout=wait_s)
            finally:
                # Unfinished (timed out, or this call was cancelled): nothing was taken.
                if not getter.done():
                    getter.cancel()
            if done:
                first.append(getter.result())
        results = first + [queue.get_nowait() for _ in range(queue.qsize())]
        gateway.seen = loop.time()
        cut = len(gateway.prefix)
        return Collected(
            self.replica_id,
            tuple(_renamed(r, r.ref.session_id[cut:]) for r in results),
            self.engine.snapshot(),
        )

    def _renew(self, gateway_id: str, now: float) -> _Gateway:
        self._expire(now)
        gateway = self._gateways.get(gateway_id)
        if gateway is None:
            # Length-prefixed, so no gateway id and session id pair can spell another's.
            prefix = f"{len(gateway_id)}:{gateway_id}:"
            gateway = self._gateways[gateway_id] = _Gateway(prefix, now)
        gateway.seen = now
        return gateway

    def _expire(self, now: float) -> None:
        for gateway_id, gateway in list(self._gateways.items()):
            if now - gateway.seen > self._lease_s:
                for scoped in gateway.sessions:
                    self.engine.cancel(scoped)
                del self._gateways[gateway_id]


def _renamed(result: InferenceResult, session_id: str) -> InferenceResult:
    return replace(result, ref=replace(result.ref, session_id=session_id))
