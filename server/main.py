"""Entry point: parse config, pick the model, run the app on uvloop, exit on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace

from engine.builder import EngineConfig
from engine.errors import EngineError
from engine.loader import BackendOptions
from server.app import App
from server.config import ServerConfig, current_environ, load_config
from server.models import choose_model

log = logging.getLogger("sensestream")


def engine_config(config: ServerConfig, model: str) -> EngineConfig:
    backend = BackendOptions(
        backend=config.backend,
        precision=config.precision,
        device=config.device,
        threads=None if config.threads is None else int(config.threads),
        tensorrt=config.tensorrt,
    )
    return EngineConfig(
        model=model,
        backend=backend,
        max_batch=config.max_batch_value,
        max_wait_ms=config.max_wait_ms,
        memory_budget=config.memory_budget_bytes,
        budget_fraction=config.budget_fraction,
        max_segment_ms=config.max_segment_ms,
    )


async def run(config: ServerConfig, on_listening: Callable[[int], None] | None = None) -> None:
    """Serve until SIGTERM or SIGINT, then drain gracefully."""
    model = await asyncio.to_thread(choose_model, config, current_environ())
    app = App(replace(config, model=model), engine_config(config, model))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, app.request_shutdown)
    await app.serve(on_listening)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = load_config(argv, current_environ())
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    def announce(port: int) -> None:
        scheme = "wss" if config.certfile else "ws"
        print(f"SenseStream listening on {scheme}://{config.host}:{port}/ws", flush=True)

    try:
        runner = _runner()
        runner(run(config, announce))
    except EngineError as exc:
        log.error("cannot start: [%s] %s", exc.code, exc)
        return 2
    return 0


def _runner() -> Callable[..., object]:
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    run_uv: Callable[..., object] = uvloop.run
    return run_uv
