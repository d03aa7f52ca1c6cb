"""A real server in this process, so a test can reach into it (wrap its VAD or backend)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from server.app import App
from server.config import ServerConfig
from streaming.vad.types import BlockVerdict, StreamingVad, VadConfig, VadEvent, VadModel


@contextlib.asynccontextmanager
async def serving(model: Path, **options: Any) -> AsyncIterator[tuple[App, str]]:
    """The app once ready, and its WebSocket URL; drained and stopped on exit."""
    config = ServerConfig.from_options(model=str(model), port=0, precision="fp32", **options)
    app = App(config, dict(os.environ))
    ports: asyncio.Queue[int] = asyncio.Queue()
    server = asyncio.create_task(app.serve(on_listening=ports.put_nowait))
    try:
        port = await asyncio.wait_for(ports.get(), 30)
        await asyncio.wait_for(app._ready.wait(), 120)
        yield app, f"ws://127.0.0.1:{port}/ws"
    finally:
        app.request_shutdown()
        await asyncio.wait_for(server, 60)


class HookedStream:
    """A real VAD stream that calls `hook` on every block before detecting in it."""

    def __init__(self, inner: StreamingVad, hook: Callable[[np.ndarray], None]) -> None:
        self.inner = inner
        self.hook = hook

    def accept(self, samples: np.ndarray) -> list[VadEvent]:
        self.hook(samples)
        return self.inner.accept(samples)

    def accept_blocks(self, blocks: Sequence[np.ndarray]) -> list[BlockVerdict]:
        for samples in blocks:
            self.hook(samples)
        return self.inner.accept_blocks(blocks)

    def flush(self) -> list[VadEvent]:
        return self.inner.flush()

    def pending_end(self) -> int | None:
        return self.inner.pending_end()


class HookedVadModel:
    """The server's real VAD with a hook on its streams: to count what they see, or to
    fail as a bug of ours would."""

    def __init__(self, inner: VadModel, hook: Callable[[np.ndarray], None]) -> None:
        self.inner = inner
        self.hook = hook
        self.name = inner.name

    def new_stream(self, config: VadConfig) -> StreamingVad:
        return HookedStream(self.inner.new_stream(config), self.hook)
