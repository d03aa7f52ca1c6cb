"""The host-wide state a server process asks for: its own (one process), or the
supervisor's (a worker: server.host.link)."""

from __future__ import annotations

from typing import Protocol

from server.host.admission import Admission, Kind, Scope
from server.host.messages import Followed
from server.host.token_uses import TokenUses
from server.http.tenants import Tenant
from server.streams.hub import StreamFullError, StreamHub, Subscription


class Host(Protocol):
    """Admission counts and live streams of the whole host."""

    async def acquire(self, kind: Kind, peer: str, force: bool = False) -> int | Scope:
        """A lease of `kind` for `peer`, or the scope of the limit that refuses it
        (`force`: taken over the limits)."""
        ...

    async def refusal(self, kind: Kind, peer: str) -> Scope | None:
        """Whether a lease would be refused now (it takes none)."""
        ...

    def release(self, lease: int) -> None: ...

    async def use_token(
        self, token_id: str, limit: int, expires_at: float, now: float, peek: bool = False
    ) -> bool:
        """Count one more session of a client secret, unless it has opened `limit`
        (`peek`: only say whether it would be counted)."""
        ...

    def give_back_token(self, token_id: str) -> None:
        """Uncount a session of a client secret that was a resume (it opened none)."""
        ...

    async def follow(self, key: str, wait_s: float) -> Subscription | Followed:
        """A subscriber of the live stream `key` on any worker (waiting up to `wait_s`
        for it to start), or why not (MISSING, FULL)."""
        ...

    async def streams(self, viewer: Tenant | None) -> list[dict[str, object]]:
        """The live streams of every worker that `viewer` may see."""
        ...


class LocalHost:
    """One process is the whole host: its own counts and its own hub."""

    def __init__(self, admission: Admission, hub: StreamHub) -> None:
        self.admission = admission
        self._hub = hub
        self._token_uses = TokenUses()

    async def acquire(self, kind: Kind, peer: str, force: bool = False) -> int | Scope:
        return self.admission.acquire(kind, peer, force=force)

    async def refusal(self, kind: Kind, peer: str) -> Scope | None:
        return self.admission.refusal(kind, peer)

    def release(self, lease: int) -> None:
        self.admission.release(lease)

    async def use_token(
        self, token_id: str, limit: int, expires_at: float, now: float, peek: bool = False
    ) -> bool:
        return self._token_uses.use(token_id, limit, expires_at, now, peek)

    def give_back_token(self, token_id: str) -> None:
        self._token_uses.give_back(token_id)

    async def follow(self, key: str, wait_s: float) -> Subscription | Followed:
        return await follow_here(self._hub, key, wait_s)

    async def streams(self, viewer: Tenant | None) -> list[dict[str, object]]:
        return self._hub.describe(viewer)


async def follow_here(hub: StreamHub, key: str, wait_s: float) -> Subscription | Followed:
    """A subscriber of a stream in this process's hub, or why not."""
    try:
        sub = await hub.follow(key, wait_s)
    except StreamFullError:
        return Followed.FULL
    return Followed.MISSING if sub is None else sub
