"""`python -m server.replicas`: run SenseStream's engine as Ray Serve replicas.

Engine options are the server's own (`--model`, `--backend`, `--device`, `--max-batch`,
`--config FILE`, …): each replica builds exactly the engine `python -m server` would.
`--local` starts a one-machine Ray cluster on 127.0.0.1 and keeps it (and the replicas)
up until Ctrl-C; gateways then attach with `python -m server --engine ray://auto`.
Otherwise it deploys to the cluster at `--address` and exits: Serve keeps the replicas.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence

from engine.remote_messages import DEFAULT_APP, LOCAL_CLUSTER_ENV
from server.config import load_config
from server.models import choose_model, tuning_folder

log = logging.getLogger("sensestream.replicas")


def replica_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m server.replicas",
        description="Run the engine as Ray Serve replicas (any other flag is an engine option"
        " of python -m server)",
    )
    parser.add_argument("--replicas", type=int, default=1, help="engine replicas (default 1)")
    parser.add_argument("--cpus-per-replica", type=float, default=1.0)
    parser.add_argument("--gpus-per-replica", type=float, default=0.0, help="1 on a GPU fleet")
    parser.add_argument("--app", default=DEFAULT_APP, help="the Serve application's name")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--address", default="auto", help="the Ray cluster (default: auto)")
    where.add_argument(
        "--local", action="store_true", help="start a cluster on 127.0.0.1 and stay up"
    )
    parser.add_argument("--local-cpus", type=int, default=None, help="CPUs the local cluster has")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    ours, rest = replica_parser().parse_known_args(argv)
    if ours.replicas < 1:
        raise SystemExit("--replicas must be at least 1")
    if ours.local:
        # Read when Ray is imported, so before the import below.
        os.environ.update(LOCAL_CLUSTER_ENV)
    try:
        from engine.ray_serve import ReplicaResources, deploy, start_local_cluster
    except ImportError as exc:
        raise SystemExit(f"Ray is not installed here: pip install '.[ray]' ({exc})") from exc
    import ray

    config = load_config(rest, os.environ)
    model = asyncio.run(choose_model(config.engine, os.environ))
    engine_config = config.engine_config(model, tuning_folder(os.environ))
    resources = ReplicaResources(ours.replicas, ours.cpus_per_replica, ours.gpus_per_replica)
    if ours.local:
        start_local_cluster(ours.local_cpus)
    else:
        ray.init(address=ours.address, log_to_driver=False, configure_logging=False)
    deploy(engine_config, resources, ours.app)
    log.info("%d engine replica(s) of %s up as Serve app %r", ours.replicas, model, ours.app)
    if ours.local:
        log.info("gateways: python -m server --engine ray://auto  (Ctrl-C stops the cluster)")
        _wait_for_signal()
        ray.shutdown()
    return 0


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


if __name__ == "__main__":
    sys.exit(main())
