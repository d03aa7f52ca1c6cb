"""`python -m server.supervisor.worker`: one worker process, started by its supervisor.

It serves connections on the listening sockets it inherited (`--listen-fds`), runs the
codecs, sessions and VAD, decodes through the engine processes (`--engine unix:…`, set by
the supervisor) and asks the supervisor (`--control`) for host-wide state. Every other
option is the server's own, as the supervisor was given it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Mapping, Sequence

from engine.errors import EngineError
from server.app import App
from server.config import ServerConfig, current_environ, load_config
from server.host.link import WorkerSeat
from server.main import configure_logging, runner


def worker_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m server.supervisor.worker")
    parser.add_argument("--worker", type=int, required=True)
    parser.add_argument("--control", required=True)
    parser.add_argument("--listen-fds", required=True)
    parser.add_argument("--ops-fds", default="")
    parser.add_argument("--serve-early", action="store_true")
    return parser


def fds(text: str) -> tuple[int, ...]:
    return tuple(int(fd) for fd in text.split(",") if fd)


async def run_worker(config: ServerConfig, environ: Mapping[str, str], seat: WorkerSeat) -> None:
    app = App(config, environ, seat)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, app.request_shutdown)
    # The supervisor reloads (it tells a worker to retire): a stray hangup is no stop.
    loop.add_signal_handler(signal.SIGHUP, lambda: None)
    await app.serve()


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    split = args.index("--") if "--" in args else len(args)
    ours = worker_parser().parse_args(args[:split])
    environ = current_environ()
    try:
        config = load_config(args[split + 1 :], environ)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log_level)
    seat = WorkerSeat(
        ours.worker, ours.control, fds(ours.listen_fds), fds(ours.ops_fds), ours.serve_early
    )
    try:
        runner()(run_worker(config, environ, seat))
    except EngineError as exc:
        print(f"error: [{exc.code}] {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
