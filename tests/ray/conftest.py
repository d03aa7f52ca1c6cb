"""A loopback-only local Ray cluster with two CPU engine replicas of the tiny model.

Ray probes a cloud metadata address and usage-stats hosts at start-up: usage stats are
off, every proxy variable points at a closed loopback port, and the node binds to
127.0.0.1, so no test sends a packet off this machine. (Each Serve replica also listens
on all interfaces for Serve's inter-deployment gRPC, which Ray 2.60 binds to `[::]`; it
receives nothing here and sends nothing.)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.remote.messages import LOCAL_CLUSTER_ENV

# Ray reads these when it is imported, which no test module before this folder does.
if "ray" in sys.modules:
    raise RuntimeError("Ray was imported before tests/ray: its cluster would not be loopback")
os.environ.update(LOCAL_CLUSTER_ENV)

LOOPBACK_ENV = {
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}
REPLICAS = 2
#: The engine options the replicas and the in-process baseline share (with fp32, which
#: tests.server.inprocess.serving always sets).
ENGINE_OPTIONS = {"max_batch": "4", "threads": 1}


@pytest.fixture(scope="session")
def ray_cluster(tiny_model_dir: Path) -> Iterator[str]:
    """The Serve app's name, once both replicas have built their engines."""
    import ray
    from ray import serve

    from engine.remote.messages import DEFAULT_APP
    from engine.remote.ray_serve import deploy, start_local_cluster
    from server.replicas import app

    saved = {k: os.environ.get(k) for k in LOOPBACK_ENV}
    os.environ.update(LOOPBACK_ENV)
    start_local_cluster(num_cpus=REPLICAS)
    try:
        # Built as a RayService's serveConfigV2 would: the builder, from plain arguments.
        arguments = {"replicas": REPLICAS, "cpus_per_replica": 0.5, "reuse_tuning": False}
        options = {"model": str(tiny_model_dir), "precision": "fp32", **ENGINE_OPTIONS}
        deploy(app(arguments | options), DEFAULT_APP)
        yield DEFAULT_APP
    finally:
        serve.shutdown()
        ray.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
