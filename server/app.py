"""The server application: start-up, routing, sessions, readiness and graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import ssl
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from engine.async_engine import AsyncEngine
from engine.builder import EngineReport, build_engine_parts
from engine.devices import device_index
from engine.metrics import EngineMetrics
from engine.monitor import Monitor, cuda_uuids, load_nvml
from engine.types import SAMPLE_RATE, RequestKind
from server.auth import key_matches, load_keys, origin_allowed, presented_token
from server.config import ServerConfig
from server.connection import Connection
from server.http import json_response, response, static_file, text_response, unauthorized
from server.listen import ListenError, page_url
from server.models import choose_model, tuning_folder
from server.routes import split_path, websocket_routes
from streaming.errors import ServerFullError
from streaming.events import ErrorEvent
from streaming.protocols.base import Codec, Handshake
from streaming.session import Session, SessionConfig
from streaming.vad_types import VadModel

log = logging.getLogger("sensestream.server")
HEALTH_PATHS = frozenset({"/healthz", "/readyz"})
OPS_PATHS = HEALTH_PATHS | {"/metrics", "/stats"}


@dataclass
class ServerMetrics:
    """Server-side metrics in the app's registry."""

    registry: CollectorRegistry
    sessions: Gauge = field(init=False)
    connections: Counter = field(init=False)
    errors: Counter = field(init=False)
    cold_start: Gauge = field(init=False)
    loop_lag: Histogram = field(init=False)

    def __post_init__(self) -> None:
        r = self.registry
        self.sessions = Gauge("server_sessions", "Open streaming sessions", registry=r)
        self.connections = Counter("server_connections", "WebSocket sessions opened", registry=r)
        self.errors = Counter("server_errors", "Client errors by code", ["code"], registry=r)
        self.cold_start = Gauge("server_cold_start_seconds", "Load plus warm-up time", registry=r)
        self.loop_lag = Histogram(
            "server_event_loop_lag_seconds",
            "How late a 100 ms timer fires on the event loop",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )

    def protocol_error(self, code: str) -> None:
        self.errors.labels(code).inc()


def session_config(config: ServerConfig, report: EngineReport) -> SessionConfig:
    return config.session.streaming(
        config.limits.session_limits(), model_name=report.model, test_model=report.test_model
    )


def make_vad(config: ServerConfig) -> VadModel:
    if config.session.vad == "webrtc":
        from streaming.vad_webrtc import WebrtcVadModel

        return WebrtcVadModel()
    from streaming.vad_fsmn import FsmnVadModel

    return FsmnVadModel.from_package()


class App:
    """Owns the engine, the VAD weights, the sessions and the listening socket."""

    def __init__(self, config: ServerConfig, environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.environ: Mapping[str, str] = environ if environ is not None else {}
        self.registry = CollectorRegistry()
        self.metrics = ServerMetrics(self.registry)
        self.monitor = Monitor(self.registry, load_nvml())
        self.engine: AsyncEngine | None = None
        self.report: EngineReport | None = None
        self.vad: VadModel | None = None
        self.sessions: dict[str, Connection] = {}
        self.keys = load_keys(config.listen.api_keys, config.listen.api_keys_file)
        self._per_ip: dict[str, int] = {}
        self.routes = websocket_routes()
        # A connection's codec, from its handshake (which knows the path) to its handler.
        self._codecs: weakref.WeakKeyDictionary[ServerConnection, Codec] = (
            weakref.WeakKeyDictionary()
        )
        self.state = "starting"
        self.server: Server | None = None
        self.started = time.monotonic()
        self._stop = asyncio.Event()
        self._ready = asyncio.Event()

    # ---- lifecycle ----------------------------------------------------------------

    async def serve(self, on_listening: Callable[[int], None] | None = None) -> None:
        """Listen at once (health answers while loading), load, serve until shutdown.

        Binding comes first, before any model work, so a taken port fails at once with
        an OSError (every address the host resolves to is bound, as asyncio does).
        """
        limits = self.config.limits
        async with contextlib.AsyncExitStack() as stack:
            server = await _bound(
                stack,
                self.config.listen.host,
                self.config.listen.port,
                serve(
                    self._handle,
                    self.config.listen.host,
                    self.config.listen.port,
                    process_request=self._process_request,
                    compression=None,  # PCM does not deflate; compression would only cost CPU
                    # Each route's codec sets its own cap at the handshake (see _admit_websocket).
                    max_size=64 * 1024,
                    select_subprotocol=_select_subprotocol,
                    ssl=self._ssl_context(),
                    write_limit=limits.send_buffer_bytes or 32 * 1024,
                    open_timeout=OPEN_TIMEOUT_S,
                ),
            )
            if self.config.listen.metrics_port is not None:
                ops_host = self.config.listen.metrics_host or self.config.listen.host
                ops = await _bound(
                    stack, ops_host, self.config.listen.metrics_port, self._ops_listener(ops_host)
                )
                log.info("operational endpoints on %s:%d", ops_host, _port_of(ops))
            self.server = server
            port = _port_of(server)
            log.info(
                "listening on port %d, page at %s; loading the model (/readyz: 503 until ready)",
                port,
                page_url(self.config, port),
            )
            if on_listening is not None:
                on_listening(port)
            await self._run_until_stopped()

    def _ops_listener(self, host: str) -> Server:
        """/metrics, /stats and health on their own address, e.g. a private interface."""
        return serve(
            _refuse,
            host,
            self.config.listen.metrics_port or 0,
            process_request=self._process_ops_request,
            open_timeout=OPEN_TIMEOUT_S,
        )

    async def _run_until_stopped(self) -> None:
        lag = asyncio.create_task(self._watch_loop_lag())
        try:
            if await self._load_unless_stopped():
                await self._stop.wait()
                await self._drain()
        finally:
            lag.cancel()
            self._ready.set()  # a failed or abandoned load must not hold long polls
            if self.engine is not None:
                await self.engine.close(timeout=self.config.shutdown_timeout_s)

    async def _load_unless_stopped(self) -> bool:
        """Load, but give up at SIGTERM: a first start can spend a minute building a model."""
        load = asyncio.create_task(self._load(), name="load")
        stop = asyncio.create_task(self._stop.wait(), name="stop-during-load")
        try:
            await asyncio.wait([load, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if load.done():
            load.result()  # a load error ends start-up here, as before
            return True
        log.info("shutdown requested while loading: giving up the load")
        load.cancel()
        await asyncio.gather(load, return_exceptions=True)
        self.state = "stopped"
        return False

    def request_shutdown(self) -> None:
        """SIGTERM/SIGINT: stop taking sessions, finish the ones in flight, then exit."""
        if self.state != "draining":
            log.info("shutdown requested: draining %d session(s)", len(self.sessions))
        self.state = "draining"
        self._ready.set()  # long-polled /readyz answers now (503: draining)
        self._stop.set()

    async def _load(self) -> None:
        started = time.perf_counter()
        model = await choose_model(self.config.engine, self.environ)
        parts = await asyncio.to_thread(
            build_engine_parts, self.config.engine_config(model, tuning_folder(self.environ))
        )
        report = parts.report
        self.vad = await asyncio.to_thread(make_vad, self.config)
        self.engine = AsyncEngine(
            parts.recognizers,
            parts.scheduler,
            parts.device_names,
            EngineMetrics(self.registry),
            feature_threads=report.feature_threads,
        )
        self.engine.start()
        self.report = report
        # CUDA_VISIBLE_DEVICES renumbers GPUs: NVML readings follow the engine's by UUID.
        self.monitor.follow(cuda_uuids(self._gpu_indices()))
        self.metrics.cold_start.set(time.perf_counter() - started)
        if self.state == "starting":
            self.state = "ready"
        self._ready.set()
        log.info(
            "ready in %.1f s: %s, max_batch %d, budget %d MiB",
            time.perf_counter() - started,
            report.backend,
            report.max_batch,
            report.memory_budget >> 20,
        )
        if report.test_model:
            log.warning(RANDOM_WEIGHTS_BANNER)

    async def _drain(self) -> None:
        drains = [conn.drain() for conn in list(self.sessions.values())]
        if drains:
            _, pending = await asyncio.wait(
                [asyncio.ensure_future(d) for d in drains], timeout=self.config.shutdown_timeout_s
            )
            if pending:
                log.warning(
                    "%d session(s) did not finish within the shutdown timeout", len(pending)
                )
        self.state = "stopped"

    async def _watch_loop_lag(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            expected = loop.time() + 0.1
            await asyncio.sleep(0.1)  # a timer, not a poll: its lateness is the measurement
            self.metrics.loop_lag.observe(max(0.0, loop.time() - expected))

    def _ssl_context(self) -> ssl.SSLContext | None:
        if self.config.listen.certfile is None or self.config.listen.keyfile is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.config.listen.certfile, self.config.listen.keyfile)
        return context

    # ---- HTTP ---------------------------------------------------------------------

    async def _process_request(
        self, connection: ServerConnection, request: Request
    ) -> Response | None:
        path, query = split_path(request.path)
        route = self.routes.get(path)
        if route is not None:
            refusal = self._admit_websocket(request)
            if refusal is None:
                handshake = Handshake(
                    query, {k.lower(): v for k, v in request.headers.raw_items()}
                )
                codec = route.make_codec(handshake, self.config.limits.session_limits())
                connection.protocol.max_message_size = codec.max_message_bytes
                self._codecs[connection] = codec
            return refusal
        # Health stays on the serving port (load balancers probe the port they route to);
        # a separate metrics port takes only /metrics and /stats away from it.
        if path in HEALTH_PATHS or (path in OPS_PATHS and self.config.listen.metrics_port is None):
            return await self._ops_route(path, request)
        return static_file(path)

    async def _process_ops_request(
        self, connection: ServerConnection, request: Request
    ) -> Response:
        """The separate metrics listener answers only the operational routes."""
        path = request.path.split("?", 1)[0]
        if path in OPS_PATHS:
            return await self._ops_route(path, request)
        return text_response(404, "not found\n")

    def _admit_websocket(self, request: Request) -> Response | None:
        if not origin_allowed(request, self.config.listen.origins):
            return text_response(403, "origin not allowed\n")
        if self.keys and not key_matches(presented_token(request), self.keys):
            self.metrics.protocol_error("unauthorized")
            return unauthorized("missing or wrong API key")
        if self.state != "ready":
            return text_response(503, f"server is {self.state}\n")
        return None

    async def _ops_route(self, path: str, request: Request) -> Response:
        guarded = (
            path in ("/metrics", "/stats") and self.config.listen.protect_metrics and self.keys
        )
        if guarded and not key_matches(presented_token(request), self.keys):
            return response(
                401, b"API key required\n", "text/plain", {"WWW-Authenticate": "Bearer"}
            )
        if path == "/healthz":
            return text_response(200, "ok\n")
        if path == "/readyz":
            await self._wait_until_ready(request)
            return self._readyz()
        if path == "/metrics":
            return self._metrics()
        return json_response(200, self.stats())

    async def _wait_until_ready(self, request: Request) -> None:
        """`/readyz?wait=S` holds the answer until ready (at most S, up to 8), a long poll.

        Deployment scripts and tests then wait on the event itself, not on a polling loop.
        """
        wait_s = readiness_wait(request.path)
        if wait_s > 0 and self.state == "starting":
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._ready.wait()

    def _readyz(self) -> Response:
        engine_ok = self.engine is not None and self.engine.healthy
        if self.state == "ready" and engine_ok:
            return text_response(200, "ready\n")
        reason = self.state if self.state != "ready" else "engine unhealthy"
        return text_response(503, f"not ready: {reason}\n")

    def _metrics(self) -> Response:
        self.monitor.snapshot(self._gpu_indices())
        if self.engine is not None:
            self.engine.metrics.queued.set(self.engine.scheduler.queued)
        return response(200, generate_latest(self.registry), "text/plain; version=0.0.4")

    def stats(self) -> dict[str, Any]:
        """JSON for /stats and the web client's engine panel."""
        engine = self.engine
        out: dict[str, Any] = {
            "state": self.state,
            "uptime_s": round(time.monotonic() - self.started, 1),
            "sessions": len(self.sessions),
            "asyncio_tasks": len(asyncio.all_tasks()),
            "test_model": bool(self.report and self.report.test_model),
            "engine": self.report.to_dict() if self.report else None,
            "process": self.monitor.snapshot(self._gpu_indices()),
        }
        if engine is not None:
            sched = engine.scheduler
            st = sched.stats
            out["queue"] = {"depth": sched.queued, "partials_dropped": st.partials_dropped}
            out["batches"] = {
                "count": st.batches,
                "max_batch": sched.config.max_batch,
                "mean_padding_efficiency": round(st.padding_efficiency_sum / max(st.batches, 1), 3),
                "oom_splits": st.oom_splits,
                # Every kind, zero included, so a dashboard's series exist from the start.
                "audio_s_by_kind": {
                    kind.value: round(st.samples_by_kind.get(kind.value, 0) / SAMPLE_RATE, 1)
                    for kind in sorted(RequestKind, key=lambda k: k.value)
                },
            }
            out["memory"] = {
                "budget_bytes": sum(b.total for b in sched.budgets),
                "in_use_bytes": sum(b.in_use for b in sched.budgets),
            }
            out["devices"] = engine.device_stats()
            out["healthy"] = engine.healthy
        return out

    def _gpu_indices(self) -> list[int]:
        """The GPUs the engine runs on (torch allocator readings touch only those)."""
        devices = self.report.devices if self.report else ()
        return [device_index(d.device) for d in devices if d.device.startswith("cuda")]

    # ---- WebSocket ----------------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        codec = self._codecs.pop(ws, None)
        if self.state == "draining":  # admitted just before the drain took its list
            await ws.close(1001, "server is shutting down")
            return
        if self.engine is None or self.vad is None or self.report is None or codec is None:
            await ws.close(1013, "not ready")
            return
        refusal = self._over_capacity(ws)
        if refusal is not None:
            self.metrics.protocol_error(refusal.code)
            for frame in codec.encode(ErrorEvent(refusal.code, refusal.message)):
                await ws.send(frame)
            await ws.close(refusal.close_code, "try again later")
            return
        if self.config.limits.send_buffer_bytes is not None:
            _limit_send_buffer(ws, self.config.limits.send_buffer_bytes)
        session_id = uuid.uuid4().hex[:12]
        session = Session(session_id, session_config(self.config, self.report), self.vad)
        conn = Connection(
            ws,
            codec,
            session,
            self.engine,
            self.metrics,
            max_pending_events=self.config.limits.max_pending_events,
            idle_timeout_s=self.config.limits.idle_timeout_s,
        )
        self.sessions[session_id] = conn
        self._per_ip[_peer(ws)] = self._per_ip.get(_peer(ws), 0) + 1
        self.metrics.connections.inc()
        self.metrics.sessions.set(len(self.sessions))
        try:
            await conn.run()
        finally:
            self.sessions.pop(session_id, None)
            left = self._per_ip.pop(_peer(ws), 1) - 1
            if left:
                self._per_ip[_peer(ws)] = left
            self.metrics.sessions.set(len(self.sessions))

    def _over_capacity(self, ws: ServerConnection) -> ServerFullError | None:
        if len(self.sessions) >= self.config.limits.max_sessions:
            return ServerFullError(
                f"server is at its limit of {self.config.limits.max_sessions} sessions"
            )
        if self._per_ip.get(_peer(ws), 0) >= self.config.limits.max_sessions_per_ip:
            limit = self.config.limits.max_sessions_per_ip
            return ServerFullError(f"this address already has {limit} sessions open")
        return None


#: The longest /readyz long poll. The library aborts any request whose answer takes longer
#: than its opening timeout (which also guards against slow clients), so the two are set
#: together: the cap plus time for the request itself to arrive.
READY_WAIT_CAP_S = 8.0
OPEN_TIMEOUT_S = READY_WAIT_CAP_S + 4.0


async def _bound(
    stack: contextlib.AsyncExitStack[bool | None],
    host: str,
    port: int,
    server: contextlib.AbstractAsyncContextManager[Server],
) -> Server:
    """Enter a listener, turning a bind failure into the one-line `ListenError`."""
    try:
        bound: Server = await stack.enter_async_context(server)
    except OSError as exc:
        # asyncio's message ends in the reason, e.g. "...: address already in use".
        reason = str(exc.strerror or exc).rsplit(": ", 1)[-1]
        raise ListenError(f"cannot listen on {host}:{port}: {reason}") from exc
    return bound


def _port_of(server: Server) -> int:
    port: int = next(iter(server.sockets)).getsockname()[1]
    return port


def readiness_wait(path: str, cap_s: float = READY_WAIT_CAP_S) -> float:
    """The `wait` query parameter of /readyz in seconds (0 when absent or malformed)."""
    values = parse_qs(urlsplit(path).query).get("wait", [])
    try:
        wait_s = float(values[0]) if values else 0.0
    except ValueError:
        return 0.0
    return min(max(wait_s, 0.0), cap_s) if math.isfinite(wait_s) else 0.0


async def _refuse(ws: ServerConnection) -> None:
    await ws.close(1008, "no WebSocket on the operational port")


def _limit_send_buffer(ws: ServerConnection, size: int) -> None:
    """Fix the kernel send buffer (no autotuning), so TCP pushes back on slow readers early."""
    sock = ws.transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)


def _select_subprotocol(
    connection: ServerConnection, offered: Sequence[Subprotocol]
) -> Subprotocol | None:
    """FunASR's clients ask for "binary"; everyone else may offer nothing (or anything)."""
    return Subprotocol("binary") if "binary" in offered else None


def _peer(ws: ServerConnection) -> str:
    address = ws.remote_address
    return str(address[0]) if address else "unknown"


RANDOM_WEIGHTS_BANNER = """
################################################################################
#  RANDOM WEIGHTS: this server runs a TEST model built by make_test_model.py.   #
#  Transcripts are meaningless. Pass --model with real SenseVoiceSmall weights. #
################################################################################"""
