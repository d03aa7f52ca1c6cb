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
from collections.abc import Mapping, Sequence
from typing import Any

from engine.remote.messages import DEFAULT_APP, LOCAL_CLUSTER_ENV
from engine.serving.builder import EngineConfig
from server.config import load_config
from server.engines.models import choose_model, tuning_folder
from server.main import configure_logging

log = logging.getLogger("sensestream.replicas")


def replica_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m server.replicas",
        allow_abbrev=False,
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
    ours, rest = replica_parser().parse_known_args(argv)
    configure_logging("info")
    if ours.local:
        # Read when Ray is imported, so before any import of it.
        os.environ.update(LOCAL_CLUSTER_ENV)
    try:
        import ray

        from engine.remote.ray_serve import build_app, deploy, start_local_cluster
    except ImportError as exc:
        raise SystemExit(f"Ray is not installed here: pip install '.[ray]' ({exc})") from exc

    engine_config, resources = _plan(ours, rest)
    if ours.local:
        start_local_cluster(ours.local_cpus)
    else:
        ray.init(address=ours.address, log_to_driver=False, configure_logging=False)
    deploy(build_app(engine_config, resources), ours.app)
    log.info(
        "%d engine replica(s) of %s up as Serve app %r",
        ours.replicas,
        engine_config.model,
        ours.app,
    )
    if ours.local:
        log.info("gateways: python -m server --engine ray://auto  (Ctrl-C stops the cluster)")
        _wait_for_signal()
        ray.shutdown()
    return 0


def app(args: Mapping[str, Any]) -> Any:
    """Serve's application builder, for a config file (a KubeRay RayService's
    `serveConfigV2`: `import_path: server.replicas:app`). `args` are this command's flags
    without their dashes, e.g. `{replicas: 4, gpus_per_replica: 1, backend: torch,
    device: "cuda:0", model: /models/SenseVoiceSmall}`; true/false for on/off flags."""
    from engine.remote.ray_serve import build_app

    engine_config, resources = _plan(*replica_parser().parse_known_args(_as_flags(args)))
    return build_app(engine_config, resources)


def _plan(ours: argparse.Namespace, rest: Sequence[str]) -> tuple[EngineConfig, Any]:
    """The replicas' engine (the model resolved, or the test model built, here) and the
    resources each takes."""
    from engine.remote.ray_serve import ReplicaResources

    if ours.replicas < 1:
        raise SystemExit("--replicas must be at least 1")
    config = load_config(rest, os.environ)
    model = asyncio.run(choose_model(config.engine, os.environ))
    engine_config = config.engine_config(model, tuning_folder(os.environ))
    return engine_config, ReplicaResources(
        ours.replicas, ours.cpus_per_replica, ours.gpus_per_replica
    )


def _as_flags(args: Mapping[str, Any]) -> list[str]:
    flags = []
    for name, value in args.items():
        flag = "--" + str(name).replace("_", "-")
        if isinstance(value, bool) or str(value).lower() in ("true", "false"):
            on = value if isinstance(value, bool) else str(value).lower() == "true"
            flags.append(flag if on else "--no-" + flag[2:])
        else:
            flags.append(f"{flag}={value}")
    return flags


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


if __name__ == "__main__":
    sys.exit(main())
