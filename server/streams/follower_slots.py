"""Follower admission: how many follow, and how many wait for a stream, in all and per address.

A follower holds a socket and a bounded outbox from its upgrade until its socket closes; a
`?wait=` handshake holds a socket (not yet upgraded) for up to 30 s. Both are counted by the
client's address (a trusted proxy's header already applied), and waits apart from followers,
so that neither one address nor a crowd of waits can take every follower slot. The counts
are the host's (server.host): with several workers, the supervisor's.
"""

from __future__ import annotations

from starlette.responses import Response

from server.config import LimitsConfig
from server.host.admission import Kind, Scope
from server.host.local import Host
from server.host.messages import Followed
from server.http.responses import text_response
from server.streams.hub import MAX_SUBSCRIBERS, Subscription


class FollowerSlots:
    """Takes follower and waiting slots from the host; refuses past the limits."""

    def __init__(self, host: Host, limits: LimitsConfig) -> None:
        self._host = host
        self._limits = limits
        self._leases: dict[Subscription, int] = {}
        self.waiting = 0  # this process's handshakes waiting for their stream

    @property
    def following(self) -> int:
        """This process's followers."""
        return len(self._leases)

    async def refusal(self, peer: str) -> Response | None:
        """Why `peer` may not follow now (the whole server 503, its own address 429)."""
        scope = await self._host.refusal(Kind.FOLLOWER, peer)
        return None if scope is None else self._refused(Kind.FOLLOWER, scope)

    async def follow(
        self, key: str, wait_s: float, peer: str, name: str
    ) -> Subscription | Response:
        """Follow the live stream `key` (its id: `name`) in a follower slot, after waiting
        up to `wait_s` in a waiting slot if it has not started; or the answer refusing it."""
        found = await self._host.follow(key, 0.0)
        if found is Followed.MISSING and wait_s > 0:
            lease = await self._host.acquire(Kind.WAITING, peer)
            if isinstance(lease, Scope):
                return self._refused(Kind.WAITING, lease)
            self.waiting += 1
            try:
                found = await self._host.follow(key, wait_s)
            finally:
                self.waiting -= 1
                self._host.release(lease)
        if found is Followed.FULL:
            return text_response(429, f"stream has {MAX_SUBSCRIBERS} subscribers\n")
        if not isinstance(found, Subscription):
            return text_response(404, f"no live stream {name!r}\n")
        # Counted once it follows: a wait that ends took no follower slot.
        lease = await self._host.acquire(Kind.FOLLOWER, peer)
        if isinstance(lease, Scope):
            found.leave()
            return self._refused(Kind.FOLLOWER, lease)
        self._leases[found] = lease
        return found

    def unsubscribe(self, sub: Subscription) -> None:
        """The follower's socket is done: leave the stream and free its slot (once)."""
        sub.leave()
        lease = self._leases.pop(sub, None)
        if lease is not None:
            self._host.release(lease)

    def _refused(self, kind: Kind, scope: Scope) -> Response:
        limits = self._limits
        if kind is Kind.FOLLOWER and scope is Scope.TOTAL:
            return text_response(
                503, f"server is at its limit of {limits.max_followers} followers\n"
            )
        if kind is Kind.FOLLOWER:
            return text_response(
                429, f"this address already has {limits.max_followers_per_ip} followers\n"
            )
        if scope is Scope.TOTAL:
            return text_response(
                503,
                f"server already holds {limits.max_waiting_followers} followers waiting "
                "for their stream\n",
            )
        return text_response(
            429,
            f"this address already has {limits.max_waiting_followers_per_ip} followers "
            "waiting for their stream\n",
        )
