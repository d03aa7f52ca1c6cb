"""A server for a protocol suite: in this process, or a supervisor with worker processes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.server.conftest import ServerProcess
from tests.server.inprocess import serving


@contextlib.asynccontextmanager
async def served(model: Path, workers: str, **options: Any) -> AsyncIterator[str]:
    """The ready server's WebSocket URL: in this process with `workers` "1", else a real
    `python -m server --workers N` with the same options (as flags)."""
    if workers == "1":
        async with serving(model, **options) as (_, url):
            yield url
        return
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in options.items()]
    proc = await asyncio.to_thread(ServerProcess, model, "--workers", workers, *flags)
    try:
        yield proc.url
    finally:
        await asyncio.to_thread(proc.stop)
