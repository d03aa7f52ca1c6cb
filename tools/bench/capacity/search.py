"""Capacity search: the largest stream count that meets the criteria, servers taking turns."""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence

from tools.bench.common.rounds import in_turn


def capacity_search(start: int, limit: int) -> Generator[int, bool, int]:
    """Double N from `start` until a run fails, then bisect.

    Yields each N to try and is sent whether it passed; returns the largest passing N
    (0: none). A generator, so that two servers' searches can take turns.
    """
    lo, hi, n = 0, None, max(1, min(start, limit))
    while hi is None:
        if (yield n):
            lo = n
            if n >= limit:
                break
            n = min(n * 2, limit)
        else:
            hi = n
    while hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        if (yield mid):
            lo = mid
        else:
            hi = mid
    return lo


def find_capacity(passes: Callable[[int], bool], start: int, limit: int) -> int:
    """The largest N that `passes`, by `capacity_search`."""
    return interleave_searches([passes], start, limit)[0]


def interleave_searches(
    passes: Sequence[Callable[[int], bool]], start: int, limit: int, alternate: bool = False
) -> list[int]:
    """Each server's capacity search, one run of each in turn (`alternate`: the order
    reversed every other round, so neither always runs first).

    This shared machine's speed drifts by up to 1.7x within minutes (the engine's own
    busy-time readings show it), so searching one server and then the other compares
    two different machines; taking turns exposes both to the same drift.
    """
    searches = [capacity_search(start, limit) for _ in passes]
    trying = {i: next(search) for i, search in enumerate(searches)}
    found = [0] * len(passes)
    round_no = 0
    while trying:
        order = in_turn(sorted(trying), round_no) if alternate else sorted(trying)
        round_no += 1
        for i in order:
            try:
                trying[i] = searches[i].send(passes[i](trying[i]))
            except StopIteration as stop:
                found[i] = stop.value
                del trying[i]
    return found
