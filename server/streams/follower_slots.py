"""Follower admission: how many follow, and how many wait for a stream, in all and per address.

A follower holds a socket and a bounded outbox from its upgrade until its socket closes; a
`?wait=` handshake holds a socket (not yet upgraded) for up to 30 s. Both are counted by the
client's address (a trusted proxy's header already applied), and waits apart from followers,
so that neither one address nor a crowd of waits can take every follower slot.
"""

from __future__ import annotations

from collections import Counter

from starlette.responses import Response

from server.config import LimitsConfig
from server.http.responses import text_response
from server.streams.hub import LiveStream, StreamHub, Subscription


class FollowerSlots:
    """Counts followers and waiting handshakes by address; refuses past the limits."""

    def __init__(self, hub: StreamHub, limits: LimitsConfig) -> None:
        self._hub = hub
        self._limits = limits
        self._following: Counter[str] = Counter()
        self._waiting: Counter[str] = Counter()
        self._peers: dict[Subscription, str] = {}

    @property
    def following(self) -> int:
        return self._following.total()

    @property
    def waiting(self) -> int:
        return self._waiting.total()

    def refusal(self, peer: str) -> Response | None:
        """Why `peer` may not follow now (the whole server 503, its own address 429)."""
        limits = self._limits
        if self.following >= limits.max_followers:
            return text_response(
                503, f"server is at its limit of {limits.max_followers} followers\n"
            )
        if self._following[peer] >= limits.max_followers_per_ip:
            return text_response(
                429, f"this address already has {limits.max_followers_per_ip} followers\n"
            )
        return None

    async def stream(
        self, stream_id: str, wait_s: float, peer: str
    ) -> LiveStream | Response | None:
        """The live stream `stream_id`, after waiting up to `wait_s` in a waiting slot if it
        has not started; a refusal when no slot is free, None when it never started."""
        live = self._hub.get(stream_id)
        if live is not None or wait_s <= 0:
            return live
        limits = self._limits
        if self.waiting >= limits.max_waiting_followers:
            return text_response(
                503,
                f"server already holds {limits.max_waiting_followers} followers waiting "
                "for their stream\n",
            )
        if self._waiting[peer] >= limits.max_waiting_followers_per_ip:
            return text_response(
                429,
                f"this address already has {limits.max_waiting_followers_per_ip} followers "
                "waiting for their stream\n",
            )
        self._waiting[peer] += 1
        try:
            return await self._hub.wait_for(stream_id, wait_s)
        finally:
            _release(self._waiting, peer)

    def subscribe(self, stream_id: str, peer: str) -> Subscription | Response | None:
        """Follow the live stream in a follower slot, or why not (None: it has ended).

        The limits are checked again here: a wait that ends took no follower slot.
        """
        refusal = self.refusal(peer)
        if refusal is not None:
            return refusal
        sub = self._hub.subscribe(stream_id)
        if sub is not None:
            self._following[peer] += 1
            self._peers[sub] = peer
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """The follower's socket is done: leave the stream and free its slot (once)."""
        self._hub.unsubscribe(sub)
        peer = self._peers.pop(sub, None)
        if peer is not None:
            _release(self._following, peer)


def _release(counts: Counter[str], peer: str) -> None:
    counts[peer] -= 1
    if counts[peer] <= 0:  # an address with nothing open leaves no entry behind
        del counts[peer]
