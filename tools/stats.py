"""A server's /stats over time: sampled in the background, waited on by condition."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from tools.http import get

Stats = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Reading:
    """One GET of /stats: when (time.monotonic()) and what (None: no usable answer)."""

    t: float
    stats: Stats | None


def read_stats(
    http_url: str, headers: Mapping[str, str] | None = None, timeout_s: float = 10.0
) -> Stats | None:
    """The server's /stats JSON, or None when it does not answer with one."""
    try:
        status, body = get(f"{http_url}/stats", headers=headers, timeout_s=timeout_s)
        stats = json.loads(body) if status == 200 else None
    except (OSError, ValueError):
        return None
    return stats if isinstance(stats, dict) else None


class StatsSampler:
    """Reads /stats every `interval_s` while open; `until` waits for a condition on the
    readings so far, woken by each new one (the server offers no event to wait on)."""

    def __init__(self, http_url: str, headers: Mapping[str, str] | None, interval_s: float) -> None:
        self.http_url = http_url
        self.headers = dict(headers or {})
        self.interval_s = interval_s
        self.readings: list[Reading] = []
        self._new = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> StatsSampler:
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _sample(self) -> None:
        while True:
            stats = await asyncio.to_thread(read_stats, self.http_url, self.headers)
            async with self._new:
                self.readings.append(Reading(time.monotonic(), stats))
                self._new.notify_all()
            await asyncio.sleep(self.interval_s)  # the sampling period, not a wait

    async def until(self, condition: Callable[[Sequence[Reading]], bool], timeout_s: float) -> bool:
        """Wait until `condition(readings)` holds; False if it did not within `timeout_s`."""
        try:
            async with asyncio.timeout(timeout_s), self._new:
                await self._new.wait_for(lambda: condition(self.readings))
        except TimeoutError:
            return False
        return True

    def since(self, t: float) -> list[Reading]:
        """The readings taken at or after `t`."""
        return [r for r in self.readings if r.t >= t]
