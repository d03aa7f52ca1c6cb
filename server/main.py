"""Entry point: config, then the app (which binds the port) on uvloop; SIGTERM/SIGINT drain."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence

from engine.errors import EngineError
from server.app import App
from server.config import ServerConfig, current_environ, load_config
from server.http.addresses import ListenError, page_url, ws_url
from server.http.auth import load_keys, load_token_secret
from server.supervisor.host import Supervisor, install_signals

log = logging.getLogger("sensestream")


async def run(
    config: ServerConfig,
    environ: Mapping[str, str],
    on_listening: Callable[[int], None] | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT, then drain gracefully."""
    app = App(config, environ)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, app.request_shutdown)
    # Its default would end the server at once, owed finals unsent.
    loop.add_signal_handler(signal.SIGHUP, _no_reload)
    await app.serve(on_listening)


def _no_reload() -> None:
    log.warning("SIGHUP ignored: a reload replaces workers, so it needs --workers 2 or more")


def main(argv: Sequence[str] | None = None) -> int:
    environ = current_environ()
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        config = load_config(args, environ)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        load_keys(config.listen.api_keys, config.listen.api_keys_file)  # the app loads them again
    except (OSError, ValueError) as exc:
        print(f"error: api keys: {exc}", file=sys.stderr)
        return 2
    try:  # the app reads it again; a short secret or an unreadable file stops us here
        load_token_secret(config.listen.token_secret, config.listen.token_secret_file)
    except (OSError, ValueError) as exc:
        print(f"error: token secret: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log_level)

    def announce(port: int) -> None:
        print(f"SenseStream listening on {ws_url(config, port)}", flush=True)
        print(f"SenseStream page: {page_url(config, port)}", flush=True)

    workers = config.worker_count(len(os.sched_getaffinity(0)))
    if workers > 1:
        return supervise(config, args, workers, announce, environ)
    try:
        runner()(run(config, environ, announce))
    except ListenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except EngineError as exc:
        log.error("cannot start: [%s] %s", exc.code, exc)
        return 2
    return 0


def configure_logging(level: str) -> None:
    """Our INFO lines only: the HTTP and WebSocket libraries log their own at INFO."""
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("websockets").setLevel(logging.WARNING)
        logging.getLogger("uvicorn").setLevel(logging.WARNING)


def supervise(
    config: ServerConfig,
    argv: Sequence[str],
    workers: int,
    announce: Callable[[int], None],
    environ: Mapping[str, str],
) -> int:
    """Serve with a supervisor, `workers` worker processes and engine processes."""

    async def serve() -> int:
        supervisor = Supervisor(config, argv, workers, environ)
        install_signals(supervisor)
        return await supervisor.run(announce)

    try:
        status: int = asyncio.run(serve())
    except ListenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return status


def runner() -> Callable[..., object]:
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    run_uv: Callable[..., object] = uvloop.run
    return run_uv
