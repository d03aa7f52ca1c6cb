"""Where the engine runs: built in this process, or replicas this gateway attaches to
(engine processes on this host over Unix sockets, or Ray Serve replicas)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from prometheus_client import CollectorRegistry

from engine.client import EngineClient
from engine.errors import EngineError
from engine.remote.gateway import RemoteEngine, Transport
from engine.remote.metrics import RemoteMetrics
from engine.remote.unix import UnixTransport
from engine.serving.async_engine import AsyncEngine
from engine.serving.builder import EngineReport, build_engine_parts
from engine.serving.metrics import EngineMetrics
from server.config import ServerConfig
from server.engines.models import choose_model, tuning_folder
from server.engines.url import RayAddress, UnixSockets

#: Seconds between looks for new engine replicas (at once whenever one is lost).
UNIX_DISCOVER_EVERY_S = 1.0
RAY_DISCOVER_EVERY_S = 10.0


class RayMissingError(EngineError):
    """`engine_url` names Ray, and Ray is not installed here."""

    code = "ray_missing"


class RayUnreachableError(EngineError):
    """`engine_url` names a Ray cluster (or Serve application) this process cannot reach."""

    code = "ray_unreachable"


#: How to get a cluster with replicas to attach to (the Makefile's `replicas` target; a
#: cluster elsewhere gets them from `python -m server.replicas --address …`).
START_REPLICAS = (
    "start one with `make replicas` (python -m server.replicas --local), or deploy replicas"
    " to a cluster with python -m server.replicas --address ADDRESS"
)


async def open_local(
    config: ServerConfig, environ: Mapping[str, str], registry: CollectorRegistry
) -> tuple[AsyncEngine, EngineReport]:
    """Load, warm and calibrate the model here (the slow part runs off the loop)."""
    model = await choose_model(config.engine, environ)
    parts = await asyncio.to_thread(
        build_engine_parts, config.engine_config(model, tuning_folder(environ))
    )
    engine = AsyncEngine.from_parts(parts, EngineMetrics(registry))
    engine.start()
    return engine, parts.report


async def open_remote(
    address: RayAddress | UnixSockets, registry: CollectorRegistry
) -> RemoteEngine:
    """Attach to the replicas (engine processes' sockets, or a Serve application);
    `RemoteEngine.attached()` then waits for the first replica to answer."""
    transport: Transport
    if isinstance(address, UnixSockets):
        transport = UnixTransport(address.paths)
        # Looking for an engine process is one connect on this host: cheap enough to do
        # every second, so a restarted engine is back within about a second.
        every_s = UNIX_DISCOVER_EVERY_S
    else:
        transport = await _ray_transport(address)
        every_s = RAY_DISCOVER_EVERY_S
    engine = RemoteEngine(transport, RemoteMetrics(registry), discover_every_s=every_s)
    engine.start()
    return engine


async def _ray_transport(address: RayAddress) -> Transport:
    try:
        from engine.remote.ray_serve import connect
    except ImportError as exc:
        raise RayMissingError(
            f"engine_url ray://… needs Ray here: pip install '.[ray]' ({exc})"
        ) from exc
    try:
        return await asyncio.to_thread(connect, address.address, address.app)
    except ConnectionError as exc:
        raise unreachable(address, exc) from exc


def unreachable(address: RayAddress, exc: ConnectionError) -> RayUnreachableError:
    """One line for a failed attach: what failed, and how to start a cluster."""
    url = address.address if "://" in address.address else f"ray://{address.address}"
    # Ray's text runs on to name its own flags (`--address`), not ours: its first sentence.
    text = str(exc).strip()
    reason = text.splitlines()[0].split(". ")[0].rstrip(".") if text else type(exc).__name__
    return RayUnreachableError(
        f"cannot attach to the Ray cluster at {url} (app {address.app}): {reason}; {START_REPLICAS}"
    )


def is_remote(engine: EngineClient | None) -> bool:
    return isinstance(engine, RemoteEngine)
