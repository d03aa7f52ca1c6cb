"""Admission counts: limits in all and per address, leases released once, owners' leases."""

from __future__ import annotations

from server.config import LimitsConfig
from server.host.admission import Admission, Kind, Limit, Scope, limits_of


def admission(total: int = 3, per_peer: int = 2) -> Admission:
    return Admission({kind: Limit(total, per_peer) for kind in Kind})


def test_a_peer_is_refused_past_its_own_limit_and_all_past_the_total() -> None:
    counts = admission()
    assert isinstance(counts.acquire(Kind.SESSION, "a"), int)
    assert isinstance(counts.acquire(Kind.SESSION, "a"), int)
    assert counts.acquire(Kind.SESSION, "a") is Scope.PEER
    assert isinstance(counts.acquire(Kind.SESSION, "b"), int)
    assert counts.acquire(Kind.SESSION, "c") is Scope.TOTAL
    assert counts.refusal(Kind.SESSION, "c") is Scope.TOTAL
    # Other kinds have their own counts.
    assert isinstance(counts.acquire(Kind.FOLLOWER, "a"), int)


def test_a_forced_lease_is_taken_over_the_limits_and_counted() -> None:
    counts = admission(total=1, per_peer=1)
    assert isinstance(counts.acquire(Kind.SESSION, "a"), int)
    assert isinstance(counts.acquire(Kind.SESSION, "a"), Scope)
    moved = counts.acquire(Kind.SESSION, "a", force=True)  # a stream handed over
    assert isinstance(moved, int) and counts.count(Kind.SESSION) == 2
    counts.release(moved)
    assert counts.count(Kind.SESSION) == 1


def test_a_lease_is_released_once() -> None:
    counts = admission(total=1)
    lease = counts.acquire(Kind.UPLOAD, "")
    assert isinstance(lease, int)
    counts.release(lease)
    counts.release(lease)  # a second release gives nothing back twice
    again = counts.acquire(Kind.UPLOAD, "")
    assert isinstance(again, int)
    assert counts.acquire(Kind.UPLOAD, "") is Scope.TOTAL
    assert counts.count(Kind.UPLOAD) == 1


def test_a_dead_owners_leases_all_come_back() -> None:
    counts = admission(total=4, per_peer=4)
    for owner in (0, 0, 1):
        assert isinstance(counts.acquire(Kind.SESSION, "a", owner), int)
    assert counts.count(Kind.SESSION, owner=0) == 2
    assert counts.release_owner(0) == 2
    assert counts.count(Kind.SESSION) == 1 and counts.count(Kind.SESSION, owner=1) == 1


def test_the_limits_come_from_the_server_config() -> None:
    limits = limits_of(LimitsConfig(max_sessions=7, max_sessions_per_ip=3, max_uploads=2))
    assert limits[Kind.SESSION] == Limit(7, 3)
    assert limits[Kind.UPLOAD] == Limit(2, 2)
