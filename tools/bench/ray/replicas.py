"""The Ray half of the benchmark: a loopback cluster, replica targets and the hop's cost.

Imported only after LOCAL_CLUSTER_ENV is set, since Ray reads it at import (by
`tools.bench.ray.cli`); the workload it drives at the replicas is `tools.bench.ray.workload`.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import ray
from ray import serve

from engine.remote.gateway import RemoteEngine
from engine.remote.messages import DEFAULT_APP
from engine.remote.ray_serve import (
    ReplicaResources,
    build_app,
    connect,
    deploy,
    start_local_cluster,
)
from tools.bench.ray.workload import HOP_AUDIO_S, engine_config, measure, tick_of, wire_bytes


def ray_version() -> str:
    return str(ray.__version__)


def ray_targets(
    args: Any, clips: Sequence[np.ndarray], cores: int, hops: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One replica with every core, then two with half each, on one local cluster."""
    start_local_cluster(num_cpus=cores)
    try:
        out = []
        for replicas in (1, 2):
            threads = max(1, cores // replicas)
            deploy(
                build_app(
                    engine_config(args, threads), ReplicaResources(replicas, cores / replicas)
                )
            )
            target = asyncio.run(_attached(args, clips, replicas, hops if replicas == 1 else None))
            # Gone before the next deploy: a rolling update would wait for CPUs it holds.
            serve.delete(DEFAULT_APP)
            label = f"{replicas} replica" + ("s" if replicas > 1 else "")
            out.append({"target": label, "replicas": replicas, "threads": threads} | target)
        return out
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()


async def _attached(
    args: Any, clips: Sequence[np.ndarray], replicas: int, hops: list[dict[str, Any]] | None
) -> dict[str, Any]:
    transport = connect("auto", DEFAULT_APP)
    engine = RemoteEngine(transport)
    engine.start()
    try:
        await asyncio.wait_for(engine.attached(replicas), 120)
        result = await measure(engine, clips, args)
        if hops is not None:
            hops += await hop_costs(transport, engine.replicas[0], args.hops)
        return result
    finally:
        await engine.close(timeout=30)


async def hop_costs(transport: Any, replica: str, count: int) -> list[dict[str, Any]]:
    """A tick carrying one request of each size (cancelled in the same tick, so nothing
    is decoded): its round trip and bytes; then one real answer's bytes."""
    out: list[dict[str, Any]] = []
    for audio_s in HOP_AUDIO_S:
        tick = tick_of(audio_s)
        times = []
        for _ in range(count):
            started = time.perf_counter()
            await transport.tick(replica, tick)
            times.append((time.perf_counter() - started) * 1000)
        out.append(
            {
                "audio_s": audio_s,
                "request_bytes": wire_bytes(tick),
                "tick_ms_p50": round(statistics.median(times), 3),
                "tick_ms_min": round(min(times), 3),
            }
        )
    real = tick_of(4.0, cancel=False)
    await transport.tick(replica, real)
    got = await transport.collect(replica, real.gateway, 60.0)
    out.append({"collect_one_result_bytes": wire_bytes(got), "results": len(got.results)})
    return out
