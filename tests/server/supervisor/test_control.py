"""The supervisor's lease table as /stats shows it: host-wide and by running worker."""

from __future__ import annotations

import asyncio
from pathlib import Path

from server.host.admission import Kind
from tests.server.host.test_link import host, run, take
from tests.server.test_streams import configured

NONE = {kind.value: 0 for kind in Kind}

Leases = tuple[dict[str, int], dict[str, int], dict[str, int]]


def test_the_lease_table_names_each_running_workers_leases_and_drops_a_dead_ones(
    tmp_path: Path,
) -> None:
    async def scenario() -> tuple[Leases, Leases]:
        async with host(tmp_path) as (control, (owner, other)):
            await owner.link.acquire(Kind.SESSION, "10.0.0.1")
            await other.link.acquire(Kind.FOLLOWER, "10.0.0.2")
            owner.streams.open(configured("call"), "s1", "v1", 0.0)
            sub = await other.link.follow("call", 5.0)  # once the stream is claimed
            before = (control.leases(0), control.leases(1), control.leases())
            await owner.link.close()  # as a killed worker's socket closes
            await asyncio.wait_for(take(sub, 3), 5)  # its stream lost: after its leases
            return before, (control.leases(0), control.leases(1), control.leases())

    before, after = run(scenario())
    assert before == (
        NONE | {"session": 1},
        NONE | {"follower": 1},
        NONE | {"session": 1, "follower": 1},
    )
    assert after == (NONE, NONE | {"follower": 1}, NONE | {"follower": 1})
