"""Admission counts, in all and by client address, for everything the server limits.

One `Admission` owns the counts of a whole host: the single process's own, or the
supervisor's for every worker. A grant is a lease; releasing it (or its owner, a worker
that died) gives the slot back, exactly once.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from server.config import LimitsConfig


class Kind(StrEnum):
    """What a lease holds a place for."""

    SESSION = "session"  # a streaming connection
    FOLLOWER = "follower"  # a follower's socket
    WAITING = "waiting"  # a follower's handshake waiting for its stream to start
    UPLOAD = "upload"  # a running file transcription


class Scope(StrEnum):
    """Which limit refused: the whole server's, or the client address's."""

    TOTAL = "total"
    PEER = "peer"


@dataclass(frozen=True, slots=True)
class Limit:
    total: int
    per_peer: int


def limits_of(config: LimitsConfig) -> dict[Kind, Limit]:
    """The limits of each kind (uploads are limited in all only)."""
    return {
        Kind.SESSION: Limit(config.max_sessions, config.max_sessions_per_ip),
        Kind.FOLLOWER: Limit(config.max_followers, config.max_followers_per_ip),
        Kind.WAITING: Limit(config.max_waiting_followers, config.max_waiting_followers_per_ip),
        Kind.UPLOAD: Limit(config.max_uploads, config.max_uploads),
    }


@dataclass(frozen=True, slots=True)
class _Held:
    kind: Kind
    peer: str
    owner: int


class Admission:
    """Counts leases by kind and peer against their limits."""

    def __init__(self, limits: Mapping[Kind, Limit]) -> None:
        self._limits = dict(limits)
        self._ids = itertools.count(1)
        self._held: dict[int, _Held] = {}
        self._totals: Counter[Kind] = Counter()
        self._by_peer: Counter[tuple[Kind, str]] = Counter()

    def refusal(self, kind: Kind, peer: str) -> Scope | None:
        """Which limit a new lease of `kind` for `peer` would pass (None: it fits)."""
        limit = self._limits[kind]
        if self._totals[kind] >= limit.total:
            return Scope.TOTAL
        if self._by_peer[kind, peer] >= limit.per_peer:
            return Scope.PEER
        return None

    def acquire(self, kind: Kind, peer: str, owner: int = 0, force: bool = False) -> int | Scope:
        """A lease id, or the scope of the limit that refuses it; `force`: over the limits
        (what was admitted once and moves, a stream a retiring worker handed over)."""
        refused = None if force else self.refusal(kind, peer)
        if refused is not None:
            return refused
        lease = next(self._ids)
        self._held[lease] = _Held(kind, peer, owner)
        self._totals[kind] += 1
        self._by_peer[kind, peer] += 1
        return lease

    def release(self, lease: int) -> None:
        """Give a lease back (a second release of the same lease does nothing)."""
        held = self._held.pop(lease, None)
        if held is None:
            return
        self._totals[held.kind] -= 1
        key = (held.kind, held.peer)
        self._by_peer[key] -= 1
        if self._by_peer[key] <= 0:  # an address with nothing open leaves no entry
            del self._by_peer[key]

    def release_owner(self, owner: int) -> int:
        """Give back every lease `owner` holds (a worker that died); how many there were."""
        leases = [lease for lease, held in self._held.items() if held.owner == owner]
        for lease in leases:
            self.release(lease)
        return len(leases)

    def count(self, kind: Kind, owner: int | None = None) -> int:
        """Leases of `kind` held, in all or by one owner."""
        if owner is None:
            return self._totals[kind]
        return sum(1 for h in self._held.values() if h.kind is kind and h.owner == owner)

    def limit(self, kind: Kind) -> Limit:
        return self._limits[kind]
