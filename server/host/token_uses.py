"""How many sessions each client secret has opened: the bound on a token's sessions.

One `TokenUses` counts for a whole host, owned where the admission counts are (the single
process's `LocalHost`, or the supervisor's control for every worker). Sans-I/O: `now` is
passed in. A token's entry is dropped once it has expired, when it can open nothing more.
"""

from __future__ import annotations

import heapq


class TokenUses:
    """Sessions opened per token id, each entry kept until its token expires."""

    def __init__(self) -> None:
        self._used: dict[str, int] = {}
        self._expiries: list[tuple[float, str]] = []  # a heap: the next to expire first

    def use(
        self, token_id: str, limit: int, expires_at: float, now: float, peek: bool = False
    ) -> bool:
        """Count one more session of the token, unless it has opened `limit` already
        (`peek`: only say whether it would be counted)."""
        self._forget(now)
        used = self._used.get(token_id, 0)
        if used >= limit:
            return False
        if peek:
            return True
        if used == 0:
            heapq.heappush(self._expiries, (expires_at, token_id))
        self._used[token_id] = used + 1
        return True

    def give_back(self, token_id: str) -> None:
        """A connection counted as a session turned out to be none (a resume of one the
        token opened before)."""
        used = self._used.get(token_id, 0)
        if used > 0:
            self._used[token_id] = used - 1

    def _forget(self, now: float) -> None:
        while self._expiries and self._expiries[0][0] <= now:
            _, token_id = heapq.heappop(self._expiries)
            self._used.pop(token_id, None)

    def __len__(self) -> int:
        return len(self._used)
