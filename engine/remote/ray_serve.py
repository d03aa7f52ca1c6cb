"""Ray Serve: the engine replica deployment, the router that pins calls, the gateway's transport.

Imported only when Ray is used (`pip install .[ray]`). Each replica holds a whole engine
(scheduler, backend, memory budget), so batching and admission stay ours: Serve places,
health-checks and replaces replicas, and routes calls. Calls name the replica they are
for (`replica=`): `PinnedRouter` sends them there, and a replica that gets a call meant
for another (the router had no better choice: that one is gone) refuses it, so a
gateway learns of a loss from the call itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray import serve
from ray.exceptions import RayError
from ray.serve.config import RequestRouterConfig
from ray.serve.exceptions import RayServeException
from ray.serve.handle import DeploymentHandle
from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from engine.errors import MisroutedError, ReplicaLostError
from engine.remote.messages import DEFAULT_APP, Collected, Hello, Tick
from engine.remote.replica import DEFAULT_LEASE_S, EngineReplica
from engine.serving.async_engine import AsyncEngine
from engine.serving.builder import EngineConfig, build_engine_parts

DEPLOYMENT = "EngineReplica"
#: A replica takes a gateway's tick and collect calls at once; Serve's default of 5 would
#: cap how many gateways one replica can serve.
MAX_ONGOING_REQUESTS = 1000
#: Failed batches in a row after which a replica reports itself unhealthy to Serve, which
#: replaces it (its gateways then resend what it owed elsewhere).
UNHEALTHY_AFTER_FAILED_BATCHES = 5
log = logging.getLogger("sensestream.engine")


class PinnedRouter(RequestRouter):
    """Routes a call to the replica it names; an unnamed call to a replica not in `exclude`."""

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        kwargs = pending_request.kwargs if pending_request is not None else {}
        target = kwargs.get("replica")
        if target is not None:
            named = [r for r in candidate_replicas if r.replica_id.unique_id == target]
            # Gone: any replica will do, and will refuse the call, which tells the caller.
            return [named or candidate_replicas]
        exclude = set(kwargs.get("exclude", ()))
        fresh = [r for r in candidate_replicas if r.replica_id.unique_id not in exclude]
        return [fresh or candidate_replicas]


class ServeReplica:
    """The deployment's body: builds the engine once, then serves gateways' calls."""

    def __init__(self, config: EngineConfig, lease_s: float = DEFAULT_LEASE_S) -> None:
        parts = build_engine_parts(config)
        # Ray scrapes its replicas through its own metrics, not a Prometheus registry of
        # ours, so the replica's engine keeps none.
        self._engine = AsyncEngine.from_parts(parts)
        replica_id = serve.get_replica_context().replica_id.unique_id
        self._replica = EngineReplica(self._engine, replica_id, parts.report, lease_s=lease_s)
        log.info("engine replica %s ready: %s", replica_id, parts.report.backend)

    async def hello(self, replica: str | None = None, exclude: Sequence[str] = ()) -> Hello:
        self._here(replica)
        return self._replica.hello()

    async def tick(self, tick: Tick, replica: str | None = None) -> None:
        self._here(replica)
        self._replica.tick(tick, asyncio.get_running_loop().time())

    async def collect(self, gateway: str, wait_s: float, replica: str | None = None) -> Collected:
        self._here(replica)
        return await self._replica.collect(gateway, wait_s)

    async def check_health(self) -> None:
        """Serve's periodic probe: a device failing batch after batch needs a new replica."""
        failed = self._engine.failed_batches_in_a_row
        if failed >= UNHEALTHY_AFTER_FAILED_BATCHES:
            raise RuntimeError(f"{failed} batches in a row failed on this replica")

    def _here(self, replica: str | None) -> None:
        """Refuse a call meant for another replica; start the engine on the first call
        (the constructor runs before Serve's event loop does)."""
        if replica is not None and replica != self._replica.replica_id:
            raise MisroutedError(f"call for replica {replica} reached {self._replica.replica_id}")
        self._engine.start()


@dataclass(frozen=True, slots=True)
class ReplicaResources:
    """What Serve reserves for each replica: one GPU each on a GPU fleet."""

    replicas: int = 1
    num_cpus: float = 1.0
    num_gpus: float = 0.0


def build_app(
    config: EngineConfig, resources: ReplicaResources, lease_s: float = DEFAULT_LEASE_S
) -> Any:
    """The Serve application: `resources.replicas` copies of the engine, calls pinned."""
    deployment = serve.deployment(
        name=DEPLOYMENT,
        num_replicas=resources.replicas,
        max_ongoing_requests=MAX_ONGOING_REQUESTS,
        ray_actor_options={"num_cpus": resources.num_cpus, "num_gpus": resources.num_gpus},
        # An import path: Serve builds the router in each caller's process from it.
        request_router_config=RequestRouterConfig(
            request_router_class=f"{__name__}.{PinnedRouter.__name__}"  # type: ignore[arg-type]
        ),
    )(ServeReplica)
    return deployment.bind(config, lease_s)


class RayTransport:
    """A gateway's calls to the replicas of one Serve application."""

    def __init__(self, handle: DeploymentHandle[Any]) -> None:
        self._handle = handle

    async def discover(self, known: frozenset[str]) -> list[Hello]:
        seen, found = set(known), list[Hello]()
        while True:
            hello: Hello = await self._call(None, self._handle.hello.remote(exclude=tuple(seen)))
            if hello.replica in seen:  # the router had no replica left to show
                return found
            seen.add(hello.replica)
            found.append(hello)

    async def tick(self, replica: str, tick: Tick) -> None:
        await self._call(replica, self._handle.tick.remote(tick, replica=replica))

    async def collect(self, replica: str, gateway: str, wait_s: float) -> Collected:
        call = self._handle.collect.remote(gateway, wait_s, replica=replica)
        got: Collected = await self._call(replica, call)
        return got

    async def close(self) -> None:
        """The handle holds nothing to release; the Ray connection is the process's."""

    async def _call(self, replica: str | None, response: Any) -> Any:
        try:
            return await response
        except (RayError, RayServeException, MisroutedError) as exc:
            raise ReplicaLostError(replica or "(discovery)", type(exc).__name__) from exc


class OffMainThreadNote(logging.Filter):
    """Demotes Ray's warning that `ray.init` off the main thread sets no SIGTERM handler:
    the server calls it off the loop on purpose and handles SIGTERM itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("SIGTERM handler is not set"):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        # Filters run after the logger's level check: redo it for the new level.
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def connect(address: str, app: str = DEFAULT_APP) -> RayTransport:
    """Attach this process to a Ray cluster as a driver (blocking: call it off the loop);
    ConnectionError when there is no cluster there, or no Serve on it."""
    if not ray.is_initialized():
        ray_worker = logging.getLogger("ray._private.worker")
        if not any(isinstance(f, OffMainThreadNote) for f in ray_worker.filters):
            ray_worker.addFilter(OffMainThreadNote())
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    try:
        handle = serve.get_deployment_handle(DEPLOYMENT, app_name=app)
    except RayServeException as exc:  # a cluster on which no replicas were ever deployed
        raise ConnectionError(f"no Serve application {app!r} runs there") from exc
    return RayTransport(handle)


def deploy(application: Any, app: str = DEFAULT_APP) -> None:
    """Run (or update) the replicas' application (`build_app`'s) on the cluster this
    process is attached to; returns once every replica has built its engine. Serve keeps
    it running after."""
    # Gateways call replicas through handles only: no HTTP proxy to open a port for.
    serve.start(proxy_location="Disabled")
    serve.run(application, name=app, route_prefix=None)


def start_local_cluster(num_cpus: int | None = None) -> None:
    """A one-machine cluster (for trying replicas, and for tests).

    Ray swaps 127.0.0.1 for the host's routable address unless the environment had
    `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (a single-machine cluster, on any OS) when Ray
    was imported: `LOCAL_CLUSTER_ENV`, which `python -m server.replicas --local` sets.
    """
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        _node_ip_address="127.0.0.1",
    )
