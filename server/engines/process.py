"""`python -m server.engines.process --socket PATH`: one engine in its own process.

Engine options are the server's own (`--model`, `--backend`, `--device`, `--max-batch`,
`--config FILE`, …): the engine is built exactly as `python -m server` builds its own
(`attach.open_local`), wrapped in an `EngineReplica` and served on a Unix socket (mode
0600). Once the socket is bound and the engine ready it prints one line,
`SenseStream engine listening on unix:PATH`; servers then attach with
`python -m server --engine unix:PATH`. SIGTERM or SIGINT closes the socket and the
engine (what is queued finishes first, within a bound) and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from engine.errors import EngineError
from engine.remote.replica import EngineReplica
from engine.remote.unix import serve_replica
from engine.serving.async_engine import AsyncEngine
from server.config import ServerConfig, current_environ, load_config
from server.engines.attach import open_local
from server.main import configure_logging

log = logging.getLogger("sensestream.engine")
#: Seconds a stopping engine gives what is queued to finish.
CLOSE_TIMEOUT_S = 10.0


def process_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m server.engines.process",
        allow_abbrev=False,
        description="Serve one engine on a Unix socket (any other flag is an engine option"
        " of python -m server)",
    )
    parser.add_argument(
        "--socket", required=True, help="the socket's path, in a folder only you can write"
    )
    parser.add_argument(
        "--stop-at-stdin-eof",
        action="store_true",
        help="stop when standard input closes (a supervisor's pipe: its owner is gone)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    ours, rest = process_parser().parse_known_args(argv)
    environ = current_environ()
    try:
        config = load_config(rest, environ)
        if config.engine.engine_url != "local":
            raise ValueError("an engine process builds its own engine: leave --engine out")
        if not Path(ours.socket).parent.is_dir():
            raise ValueError(f"no folder for the socket {ours.socket}")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log_level)

    def announce(path: str) -> None:
        print(f"SenseStream engine listening on unix:{path}", flush=True)

    try:
        asyncio.run(serve_engine(config, environ, ours.socket, announce, ours.stop_at_stdin_eof))
    except (EngineError, OSError) as exc:
        log.error("cannot serve the engine: %s", exc)
        return 2
    return 0


async def serve_engine(
    config: ServerConfig,
    environ: Mapping[str, str],
    path: str,
    announce: Callable[[str], None],
    stop_at_stdin_eof: bool = False,
) -> None:
    """Build the engine, serve it on `path` until SIGTERM or SIGINT (or, asked to, its
    standard input's end), then close both."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if stop_at_stdin_eof:
        watch = asyncio.ensure_future(stdin_closed())
        watch.add_done_callback(lambda _: stop.set())
    registry = CollectorRegistry()
    load = asyncio.ensure_future(open_local(config, environ, registry))
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({load, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if not load.done():  # stopped while loading: give the load up
        load.cancel()
        await asyncio.gather(load, return_exceptions=True)
        return
    engine, report = load.result()
    try:
        # One id per process: a restarted engine is a new replica to its gateways.
        replica_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        replica = EngineReplica(engine, replica_id, report)
        # Its supervisor scrapes its metrics through the socket (one /metrics per host).
        server = await serve_replica(replica, path, lambda: scrape(engine, registry))
        try:
            log.info(
                "engine %s ready: %s, max_batch %d", replica_id, report.backend, report.max_batch
            )
            announce(path)
            await stopped
        finally:
            await server.close()
    finally:
        await engine.close(CLOSE_TIMEOUT_S)


async def stdin_closed() -> None:
    """Returns when standard input reaches its end (what a supervisor's death looks like
    to a child: the pipe's other end closes)."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(4096):
        pass  # nothing is ever written; anything that is, is ignored


def scrape(engine: AsyncEngine, registry: CollectorRegistry) -> bytes:
    engine.snapshot()  # brings the queue gauges up to date, as a server's /metrics does
    return generate_latest(registry)


if __name__ == "__main__":
    sys.exit(main())
