"""`python -m server --workers N` (N > 1): the supervisor of one host's processes.

It binds the listening sockets once (a taken port fails at once, before any model loads),
starts one engine process per device (unless `--engine` names engines elsewhere) and N
worker processes that share the sockets, and owns the host-wide state (server.supervisor
.control). A child that dies is restarted. SIGTERM stops the workers first (each drains:
owed finals, `end`, 1001), then the engines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from engine.serving.devices import parse_devices
from server.config import ENV_PREFIX, ListenConfig, ServerConfig
from server.engines.url import parse_engine_url
from server.host.admission import Admission, limits_of
from server.host.exposition import Exposition, merge
from server.host.messages import Gathered, Topic
from server.http.listener import bind, bound_port
from server.supervisor.children import Child, ChildSpec, Keeper
from server.supervisor.control import Control
from server.supervisor.reload import ReloadPlan, reload_workers
from server.supervisor.scrape import scrape_engine

log = logging.getLogger("sensestream.supervisor")

#: Seconds beyond the drain timeout a worker gets before it is killed at shutdown.
STOP_MARGIN_S = 10.0
#: How long a reload waits for a new worker to load (a model may be built on first use).
READY_S = 300.0


class Supervisor:
    """One host: the sockets, the engine and worker processes, the host-wide state."""

    def __init__(
        self,
        config: ServerConfig,
        argv: Sequence[str],
        workers: int,
        environ: Mapping[str, str],
    ) -> None:
        self.config = config
        self._argv = tuple(argv)
        self._workers = workers
        self._worker_env = worker_environ(config.listen, environ)
        self._registry = CollectorRegistry()
        self._restarts = Gauge(
            "supervisor_restarts",
            "Child processes restarted since start-up",
            ["role"],
            registry=self._registry,
        )
        self._lost = Gauge(
            "supervisor_children_lost",
            "Child processes given up: they kept failing their restarts",
            ["role"],
            registry=self._registry,
        )
        self._keeper = Keeper(self._fatal_exit)
        self.control = Control(Admission(limits_of(config.limits)), self._gathered)
        self.engines: list[tuple[Child, str]] = []  # (child, device)
        self.workers: list[Child] = []
        self._engine_paths: tuple[str, ...] = ()
        self._stop = asyncio.Event()
        self._fatal: str | None = None
        self._reloading: asyncio.Task[bool] | None = None

    async def run(self, on_listening: Callable[[int], None]) -> int:
        """Serve until SIGTERM/SIGINT (0), or a lost child that stops the host (2): one
        that cannot start, or the last of its kind given up."""
        listen = self.config.listen
        sockets = bind(listen.host, listen.port, self.config.limits.send_buffer_bytes)
        ops: list[socket.socket] = []
        runtime = tempfile.mkdtemp(prefix="sensestream-")  # 0700: only this user's
        try:
            if listen.metrics_port is not None:
                ops = bind(listen.metrics_host or listen.host, listen.metrics_port)
            on_listening(bound_port(sockets))
            await self._start(runtime, sockets, ops)
            await self._stop.wait()
        finally:
            await self._shutdown()
            for sock in (*sockets, *ops):
                sock.close()
            shutil.rmtree(runtime, ignore_errors=True)
        if self._fatal is not None:
            log.error("stopping: %s", self._fatal)
            return 2
        return 0

    def request_shutdown(self) -> None:
        self._stop.set()

    def request_reload(self) -> None:
        """SIGHUP: replace the workers one at a time (a reload already going on goes on)."""
        if self._stop.is_set() or not self.workers:
            return
        if self._reloading is not None and not self._reloading.done():
            log.info("reload: one is already going on")
            return
        plan = ReloadPlan(READY_S, self.config.shutdown_timeout_s + STOP_MARGIN_S)
        self._reloading = asyncio.create_task(
            reload_workers(self.workers, self.control, self._keeper, plan), name="reload"
        )

    async def _start(
        self, runtime: str, sockets: list[socket.socket], ops: list[socket.socket]
    ) -> None:
        await self.control.start(os.path.join(runtime, "control"))
        remote = parse_engine_url(self.config.engine.engine_url)
        if remote is None:
            devices = parse_devices(self.config.engine.device)
            paths = [os.path.join(runtime, f"engine-{i}") for i in range(len(devices))]
            for path, device in zip(paths, devices, strict=True):
                spec = ChildSpec(f"engine {device}", self._engine_argv(path, device), "engine")
                self.engines.append((Child(spec), device))
            self._engine_paths = tuple(paths)
            engine_url = "unix:" + ",".join(paths)
        else:
            engine_url = self.config.engine.engine_url
        fds = tuple(s.fileno() for s in sockets)
        ops_fds = tuple(s.fileno() for s in ops)
        for index in range(self._workers):
            argv = self._worker_argv(index, runtime, fds, ops_fds, engine_url)
            # Worker 0's first start answers health checks while the model loads.
            first = self._worker_argv(index, runtime, fds, ops_fds, engine_url, early=True)
            spec = ChildSpec(
                f"worker {index}",
                argv,
                "worker",
                (*fds, *ops_fds),
                first if index == 0 else None,
                self._worker_env,
            )
            self.workers.append(Child(spec))
        for child in (*(c for c, _ in self.engines), *self.workers):
            await child.start()
            self._keeper.watch(child)

    def _fatal_exit(self, why: str) -> None:
        self._fatal = self._fatal or why
        self._stop.set()

    async def _shutdown(self) -> None:
        """Workers first (they drain their sessions), then the engines they decode on."""
        if self._reloading is not None:
            self._reloading.cancel()
            await asyncio.gather(self._reloading, return_exceptions=True)
        drain_s = self.config.shutdown_timeout_s + STOP_MARGIN_S
        await asyncio.gather(*(w.stop(drain_s) for w in self.workers))
        await asyncio.gather(*(e.stop(drain_s) for e, _ in self.engines))
        await self._keeper.close()
        await self.control.close()

    def _engine_argv(self, path: str, device: str) -> tuple[str, ...]:
        # The server's own options, so the engine is built as a single process builds it;
        # the device last, as argparse lets the last one win.
        return (
            sys.executable, "-m", "server.engines.process", "--socket", path,
            "--stop-at-stdin-eof", *self._argv, "--device", device,
        )  # fmt: skip

    def _worker_argv(
        self,
        index: int,
        runtime: str,
        fds: tuple[int, ...],
        ops_fds: tuple[int, ...],
        engine_url: str,
        *,
        early: bool = False,
    ) -> tuple[str, ...]:
        seat = ["--worker", str(index), "--control", os.path.join(runtime, "control")]
        seat += ["--listen-fds", ",".join(map(str, fds))]
        if ops_fds:
            seat += ["--ops-fds", ",".join(map(str, ops_fds))]
        if early:
            seat.append("--serve-early")
        return (
            sys.executable, "-m", "server.supervisor.worker", *seat, "--",
            *self._argv, "--workers", "1", "--engine", engine_url,
        )  # fmt: skip

    # ---- gathers -----------------------------------------------------------------------

    def processes(self, reports: dict[int, Any]) -> dict[str, object]:
        """The `processes` of /stats: who runs, with each worker's sessions, and the
        supervisor's lease table (host-wide and by worker, read together)."""
        workers = []
        for index, child in enumerate(self.workers):
            report = reports.get(index)
            sessions = report.get("sessions") if isinstance(report, dict) else None
            leases = self.control.leases(index)
            workers.append(
                {"worker": index, "pid": child.pid, "sessions": sessions, "leases": leases}
            )
        return {
            "supervisor": os.getpid(),
            "engines": [{"pid": c.pid, "device": device} for c, device in self.engines],
            "workers": workers,
            "leases": self.control.leases(),
        }

    async def _gathered(self, topic: Topic, answers: list[tuple[int, object]]) -> object:
        if topic is Topic.STATS:
            reports = dict(answers)
            return Gathered(self.processes(reports), tuple(reports.values()))
        return await self._metrics(answers)

    async def _metrics(self, answers: list[tuple[int, object]]) -> bytes:
        """Every process's series in one exposition, each labelled by its process."""
        for role, children in (("engine", [c for c, _ in self.engines]), ("worker", self.workers)):
            self._restarts.labels(role).set(sum(c.restarts for c in children))
            self._lost.labels(role).set(self._keeper.lost(role))
        parts = [Exposition({"process": "supervisor"}, generate_latest(self._registry).decode())]
        for index, text in answers:
            if isinstance(text, bytes):
                parts.append(Exposition({"process": "worker", "worker": str(index)}, text.decode()))
        scraped = await asyncio.gather(*(scrape_engine(p) for p in self._engine_paths))
        for index, text in enumerate(scraped):
            if text is not None:
                parts.append(Exposition({"process": "engine", "engine": str(index)}, text))
        return merge(parts)


#: Where a worker finds the secret its supervisor made (the option's own variable).
TOKEN_SECRET_VARIABLE = ENV_PREFIX + "TOKEN_SECRET"


def worker_environ(listen: ListenConfig, environ: Mapping[str, str]) -> dict[str, str] | None:
    """The workers' environment: None (the supervisor's own) when a token secret is
    configured, which each worker then reads as the supervisor did; else the supervisor's
    with a random secret made here, once, so that every worker, restarted ones too, signs
    and checks client secrets with the same one. An environment is private to the user;
    a command line is not."""
    if listen.token_secret is not None or listen.token_secret_file is not None:
        return None
    return {**environ, TOKEN_SECRET_VARIABLE: secrets.token_urlsafe(48)}


def install_signals(supervisor: Supervisor) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, supervisor.request_shutdown)
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGHUP, supervisor.request_reload)
