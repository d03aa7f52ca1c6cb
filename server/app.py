"""The server application: start-up, routing, sessions, readiness and graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.websockets import WebSocket

from engine.client import EngineClient
from engine.decoding.hotwords import Speller
from engine.errors import HotwordError
from engine.model.tokenizer import Tokenizer
from engine.serving.builder import EngineReport
from engine.serving.devices import device_index
from engine.serving.monitor import Monitor, cuda_uuids, load_nvml
from engine.types import Hotword
from server.config import ListenConfig, ServerConfig
from server.engines.attach import is_remote, open_local, open_remote
from server.engines.url import UnixSockets, parse_engine_url
from server.files.api import FileApi
from server.host.admission import Admission, Kind, Scope, limits_of
from server.host.link import HostLink, WorkerSeat
from server.host.local import Host, LocalHost
from server.host.messages import Gathered, Topic
from server.hotwords_file import stream_refusal
from server.http.access import scoped, speaks_for
from server.http.addresses import page_url
from server.http.auth import load_keys, load_token_secret, origin_allowed, presented_token
from server.http.client_address import client_host
from server.http.client_secret_api import ClientSecretApi
from server.http.client_secrets import Grant
from server.http.credentials import Credentials, Refused
from server.http.listener import (
    QuietServer,
    asgi_server,
    bind,
    bound_port,
    stop,
    stop_accepting,
)
from server.http.responses import json_response, response, static_file, text_response, unauthorized
from server.http.routes import WebSocketRoute, streaming_paths, websocket_routes
from server.http.scopes import STREAMS_READ
from server.http.tables import main_app, ops_app
from server.http.tenants import Claim, Tenant, followed_key
from server.live.connection import Connection
from server.live.drain import DrainPlan, drain_all
from server.live.socket_port import ClientGone, Port, SocketPort
from server.live.vad_pump import VadPump
from server.resume.route import Adopted, Adopter, ResumePolicy, Resumes
from server.streams.follower_slots import FollowerSlots
from server.streams.hub import Publisher, StreamHub, Subscription
from server.streams.subscribers import Follower
from server.streams.webhooks import WebhookPolicy, Webhooks
from streaming.core import SessionCore
from streaming.errors import ProtocolError, ServerFullError
from streaming.events import ErrorEvent
from streaming.pins import Pins
from streaming.protocols.base import Codec, CodecSettings, Handshake
from streaming.protocols.twilio.codec import TwilioCodec
from streaming.protocols.twilio.jitter import JitterStats
from streaming.protocols.v1.codec import V1Codec
from streaming.session import SessionConfig
from streaming.vad.types import VadModel

log = logging.getLogger("sensestream.server")


@dataclass
class ServerMetrics:
    """Server-side metrics in the app's registry."""

    registry: CollectorRegistry
    sessions: Gauge = field(init=False)
    connections: Counter = field(init=False)
    errors: Counter = field(init=False)
    webhooks: Counter = field(init=False)
    media_dropped: Counter = field(init=False)
    cold_start: Gauge = field(init=False)
    loop_lag: Histogram = field(init=False)
    ready: Gauge = field(init=False)

    def __post_init__(self) -> None:
        r = self.registry
        self.sessions = Gauge("server_sessions", "Open streaming sessions", registry=r)
        self.connections = Counter("server_connections", "WebSocket sessions opened", registry=r)
        self.errors = Counter("server_errors", "Client errors by code", ["code"], registry=r)
        self.webhooks = Counter(
            "server_webhook_events", "Webhook events by outcome", ["outcome"], registry=r
        )
        self.media_dropped = Counter(
            "server_media_chunks_dropped",
            "Telephony media chunks dropped by placement (duplicate or late)",
            ["reason"],
            registry=r,
        )
        self.cold_start = Gauge("server_cold_start_seconds", "Load plus warm-up time", registry=r)
        # Read at each scrape (App.readiness): 1 exactly when /readyz answers 200.
        self.ready = Gauge("server_ready", "1 when /readyz answers 200, else 0", registry=r)
        self.loop_lag = Histogram(
            "server_event_loop_lag_seconds",
            "How late a 100 ms timer fires on the event loop",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )

    def protocol_error(self, code: str) -> None:
        self.errors.labels(code).inc()

    def twilio_placement(self, session_id: str, stats: JitterStats) -> None:
        """What placing a Twilio stream's chunks by timestamp dropped and filled."""
        self.media_dropped.labels("duplicate").inc(stats.duplicates)
        self.media_dropped.labels("late").inc(stats.late)
        if stats.duplicates or stats.late or stats.clock_jumps or stats.misplaced:
            log.info("session %s: twilio placement: %s", session_id, stats)

    def webhook_event(self, outcome: str) -> None:
        """One webhook event delivered, failed (after its retries) or dropped (queue full)."""
        self.webhooks.labels(outcome).inc()


def webhook_policy(listen: ListenConfig) -> WebhookPolicy | None:
    if not listen.webhook_prefixes or listen.webhook_secret is None:
        return None
    return WebhookPolicy(listen.webhook_prefixes, listen.webhook_secret.encode())


def session_config(config: ServerConfig, report: EngineReport) -> SessionConfig:
    """Every session's settings; raises HotwordError when the model cannot write one of
    the server's own hotwords (the server does not start)."""
    settings = config.session.streaming(
        config.limits.session_limits(),
        model_name=report.model,
        test_model=report.test_model,
        demo_model=report.demo_model,
    )
    if not report.tokenizer:  # an engine that does not say: it refuses at the first decode
        return settings
    speller = Speller(Tokenizer.from_serialized(report.tokenizer))
    refused = speller.refusal(settings.hotwords)
    if refused is not None:
        raise HotwordError(f"--hotwords-file: {refused}")
    return replace(settings, hotword_refusal=partial(stream_refusal, speller, settings.hotwords))


def vad_on_thread(
    setting: bool | None, report: EngineReport, *, remote: bool, worker: bool = False
) -> bool:
    """Whether live sessions' VAD gets its own thread: as set, else in a worker process
    or when a local GPU decodes.

    A GPU engine leaves the CPU cores to the loop and the VAD; a CPU engine's decodes
    already use them. A worker's engine runs in another process, so its loop and its VAD
    share the worker's GIL with nothing else (the thread lets the VAD's ONNX runs overlap
    the loop's work). Other remote replicas are unmeasured: they keep the VAD on the loop.
    """
    if setting is not None:
        return setting
    if worker:
        return True
    return not remote and any(d.device.startswith("cuda") for d in report.devices)


def make_vad(config: ServerConfig) -> VadModel:
    if config.session.vad == "webrtc":
        from streaming.vad.webrtc import WebrtcVadModel

        return WebrtcVadModel()
    from streaming.vad.fsmn import FsmnVadModel

    return FsmnVadModel.from_package()


class App:
    """Owns the engine, the VAD weights, the sessions and the listening socket."""

    def __init__(
        self,
        config: ServerConfig,
        environ: Mapping[str, str] | None = None,
        seat: WorkerSeat | None = None,
    ) -> None:
        self.config = config
        self.environ: Mapping[str, str] = environ if environ is not None else {}
        self.registry = CollectorRegistry()
        self.metrics = ServerMetrics(self.registry)
        self.metrics.ready.set_function(lambda: float(self.readiness()[0]))
        self.monitor = Monitor(self.registry, load_nvml())
        self.engine: EngineClient | None = None
        self.report: EngineReport | None = None
        # Built once the engine is known: it reads the hotwords file, which no
        # connection should wait for on the loop.
        self._session_config: SessionConfig | None = None
        self.vad: VadModel | None = None
        self.vad_pump: VadPump | None = None  # with `vad_thread`: live sessions' VAD thread
        self.sessions: dict[str, Connection] = {}
        # Host-wide state: this process's own, or the supervisor's (a worker's link).
        self.seat = seat
        # A relayed follower may queue what a local one may (its backlog included).
        capacity = config.limits.max_pending_events + config.limits.stream_backlog
        self.link = (
            HostLink(seat.worker, seat.control, self, capacity) if seat is not None else None
        )
        self.streams = StreamHub(
            config.limits.max_pending_events, config.limits.stream_backlog, self.link
        )
        self.host: Host = self.link or LocalHost(Admission(limits_of(config.limits)), self.streams)
        self.follower_slots = FollowerSlots(self.host, config.limits)
        self.webhooks = Webhooks(webhook_policy(config.listen), self.metrics.webhook_event)
        self.keys = load_keys(config.listen.api_keys, config.listen.api_keys_file)
        secret = self._token_secret()
        self.credentials = Credentials(self.keys, secret)
        limits = config.limits
        policy = ResumePolicy(limits.resume_grace_s, limits.max_session_s, secret)
        self.resumes = Resumes(policy, self.sessions.get, self.link)
        if self.link is not None:
            self.link.on_take_up = self.resumes.take_up_piped
            self.link.on_retire = self.retire
        self._retiring = False  # a reload replaces this worker: its streams are handed on
        self._main_server: QuietServer | None = None  # serving the main port, once it does
        self.origins = config.listen.origin_policy()
        self.routes = websocket_routes()
        self.file_api = FileApi(self)
        self.client_secret_api = ClientSecretApi(self)
        self.state = "starting"
        self._engines_expected = 1
        self.port: int | None = None
        self.started = time.monotonic()
        self._stop = asyncio.Event()
        self._ready = asyncio.Event()

    def _token_secret(self) -> bytes:
        """What client secrets are signed with: the configured secret, else one made here
        once (this process is the whole host); a worker's always comes from its supervisor,
        which makes one for all its workers (server.supervisor.host.worker_environ)."""
        listen = self.config.listen
        secret = load_token_secret(listen.token_secret, listen.token_secret_file)
        if secret is not None:
            return secret
        if self.seat is not None:
            raise RuntimeError("a worker's token secret comes from its supervisor; none came")
        return secrets.token_bytes(32)

    # ---- lifecycle ----------------------------------------------------------------

    async def serve(self, on_listening: Callable[[int], None] | None = None) -> None:
        """Listen at once (health answers while loading), load, serve until shutdown.

        Binding comes first, before any model work, so a taken port fails at once.
        """
        sockets, ops_sockets = self._sockets()
        if self.link is not None:
            await self.link.connect()
            self.link.on_lost = self.request_shutdown  # no supervisor: stop, as told to
        self._main_server = self._asgi_server(main_app(self))
        servers = [(self._main_server, sockets)]
        if ops_sockets:
            servers.append((self._asgi_server(ops_app(self)), ops_sockets))
        tasks: list[asyncio.Task[None]] = []

        def start_serving() -> None:
            tasks.extend(asyncio.create_task(srv.serve(socks)) for srv, socks in servers)

        if self.seat is None or self.seat.serve_early:
            start_serving()
        try:
            self.port = bound_port(sockets)
            log.info(
                "listening on port %d, page at %s; loading the model (/readyz: 503 until ready)",
                self.port,
                page_url(self.config, self.port),
            )
            if on_listening is not None:
                on_listening(self.port)
            # A worker that shares its sockets with ready workers takes connections only
            # once ready itself: until then the kernel hands them to the others.
            await self._run_until_stopped(None if tasks else start_serving)
        finally:
            for (srv, _), task in zip(servers, tasks, strict=False):
                await stop(srv, task)

    def _sockets(self) -> tuple[list[socket.socket], list[socket.socket]]:
        """The listening sockets: a worker's, inherited from its supervisor; else bound
        here (the main port's, then the ops port's when asked for)."""
        if self.seat is not None:
            inherited = [socket.socket(fileno=fd) for fd in self.seat.listen_fds]
            return inherited, [socket.socket(fileno=fd) for fd in self.seat.ops_fds]
        listen, limits = self.config.listen, self.config.limits
        sockets = bind(listen.host, listen.port, limits.send_buffer_bytes)
        ops_sockets = []
        if listen.metrics_port is not None:
            ops_host = listen.metrics_host or listen.host
            try:
                ops_sockets = bind(ops_host, listen.metrics_port)
            except BaseException:
                for sock in sockets:
                    sock.close()
                raise
            log.info("operational endpoints on %s:%d", ops_host, bound_port(ops_sockets))
        return sockets, ops_sockets

    def _asgi_server(self, asgi: Starlette) -> QuietServer:
        listen = self.config.listen
        limits = self.config.limits.session_limits()
        return asgi_server(
            asgi,
            listen.trusted_proxies,
            ssl_certfile=listen.certfile,
            ssl_keyfile=listen.keyfile,
            ws_max_size=max(
                route.max_message_bytes(CodecSettings(limits)) for route in self.routes.values()
            ),
            ws_ping_interval=20.0,
            ws_ping_timeout=20.0,
            ws_per_message_deflate=False,  # PCM does not deflate; compression only costs CPU
            timeout_graceful_shutdown=5,
        )

    async def _run_until_stopped(self, once_ready: Callable[[], None] | None = None) -> None:
        lag = asyncio.create_task(self._watch_loop_lag())
        try:
            if await self._load_unless_stopped():
                if once_ready is not None and self.state == "ready":
                    once_ready()
                await self._stop.wait()
                await self._drain()
        finally:
            lag.cancel()
            self._ready.set()  # a failed or abandoned load must not hold long polls
            if self.engine is not None:
                await self.engine.close(timeout=self.config.shutdown_timeout_s)
            await self.webhooks.close(timeout_s=self.config.shutdown_timeout_s)
            if self.vad_pump is not None:
                await self.vad_pump.close()
            if self.link is not None:
                await self.link.close()

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

    def retire(self) -> None:
        """A reload replaces this worker: take no new connections (the other workers take
        them, resumes of the streams handed on too), hand its streams on, then stop."""
        self._retiring = True
        if self._main_server is not None:
            stop_accepting(self._main_server)
        self.request_shutdown()

    def request_shutdown(self) -> None:
        """SIGTERM/SIGINT: stop taking sessions, finish the ones in flight, then exit."""
        if self.state != "draining":
            log.info("shutdown requested: draining %d session(s)", len(self.sessions))
        self.state = "draining"
        self._ready.set()  # long-polled /readyz answers now (503: draining)
        self._stop.set()

    async def _load(self) -> None:
        started = time.perf_counter()
        remote = parse_engine_url(self.config.engine.engine_url)
        if remote is None:
            self.engine, report = await open_local(self.config, self.environ, self.registry)
        else:
            log.info("attaching to engine replicas at %s", remote)
            if isinstance(remote, UnixSockets):
                self._engines_expected = len(remote.paths)
            self.engine = attaching = await open_remote(remote, self.registry)
            report = await attaching.attached()
        self.vad = await asyncio.to_thread(make_vad, self.config)
        on_thread = vad_on_thread(
            self.config.session.vad_thread,
            report,
            remote=remote is not None,
            worker=self.seat is not None,
        )
        if on_thread:
            self.vad_pump = VadPump()
            self.vad_pump.start()
        self._session_config = await asyncio.to_thread(session_config, self.config, report)
        self.report = report
        # CUDA_VISIBLE_DEVICES renumbers GPUs: NVML readings follow the engine's by UUID.
        self.monitor.follow(cuda_uuids(self._gpu_indices()))
        self.metrics.cold_start.set(time.perf_counter() - started)
        if self.state == "starting":
            self.state = "ready"
        self._ready.set()
        if self.link is not None:
            self.link.ready()  # a reload waits for it before retiring the next worker
        log.info(
            "ready in %.1f s: %s, max_batch %d, budget %d MiB",
            time.perf_counter() - started,
            report.backend,
            report.max_batch,
            report.memory_budget >> 20,
        )
        if report.test_model:
            log.warning(RANDOM_WEIGHTS_BANNER)
        if report.demo_model:
            log.warning(DEMO_MODEL_BANNER)

    async def _drain(self) -> None:
        keep = self.link.hand_over if self._retiring and self.link is not None else None
        plan = DrainPlan(
            self.config.shutdown_timeout_s,
            # Half the drain at most: what is owed after the wait must still go out.
            min(self.config.hand_off_s, self.config.shutdown_timeout_s / 2),
            keep,
            self.config.limits.resume_grace_s,
        )
        await drain_all(list(self.sessions.values()), plan)
        self.state = "stopped"

    async def _watch_loop_lag(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            expected = loop.time() + 0.1
            await asyncio.sleep(0.1)  # a timer, not a poll: its lateness is the measurement
            self.metrics.loop_lag.observe(max(0.0, loop.time() - expected))

    # ---- HTTP ---------------------------------------------------------------------

    async def page(self, request: Request) -> Response:
        return static_file(request.url.path)

    async def healthz(self, request: Request) -> Response:
        return text_response(200, "ok\n")

    async def readyz(self, request: Request) -> Response:
        await self._wait_until_ready(request)
        return self._readyz()

    async def metrics_route(self, request: Request) -> Response:
        return self._guarded(request) or await self._metrics()

    async def stats_route(self, request: Request) -> Response:
        return self._guarded(request) or json_response(200, await self.stats())

    async def stream_probe(self, request: Request, key_in_band: bool = False) -> Response:
        who = self._checked(request, key_in_band)
        if isinstance(who, Response):
            return who
        if isinstance(who, Grant):  # as the handshake would, without taking a session
            used_up = await self._used_up(who, peek=True)
            if used_up is not None:
                return used_up
        return text_response(
            426, "upgrade required: this is a WebSocket endpoint\n", {"Upgrade": "websocket"}
        )

    def _guarded(self, request: Request) -> Response | None:
        """/metrics and /stats refuse other sites' pages, and ask for a key when the keys
        protect them too (any key: they count, they list no tenant's streams).

        Keys only, no client secret: a secret is a browser's pass to its own sessions,
        and a page that shows the host's load is an operator's.
        """
        refusal = self.origin_refusal(request)
        guarded = self.config.listen.protect_metrics and self.keys
        if refusal is None and guarded and self.keys.identify(presented_token(request)) is None:
            return text_response(401, "API key required\n", {"WWW-Authenticate": "Bearer"})
        return refusal

    def origin_refusal(self, conn: HTTPConnection) -> Response | None:
        """403 for a browser page of an origin the policy does not allow (see OriginPolicy)."""
        if origin_allowed(conn, self.origins):
            return None
        return text_response(403, "origin not allowed\n")

    def hotword_refusal(self, hotwords: Sequence[Hotword]) -> str | None:
        """Why the model cannot write some of these hotwords (None: it can, or the model
        is not loaded yet and its engine will say)."""
        if self._session_config is None:
            return None
        return self._session_config.hotword_refusal(hotwords)

    def credential(self, conn: HTTPConnection) -> Tenant | Grant | Refused:
        """Whose key or client secret the client presented (`Credentials.identify`)."""
        return self.credentials.identify(presented_token(conn), time.time())

    def caller(self, conn: HTTPConnection) -> Tenant | None:
        """The tenant of the client's key or client secret (the anonymous one when the
        server has no keys), or None for a missing or wrong one (a refusal is counted)."""
        who = self._counted(self.credential(conn))
        if isinstance(who, Refused):
            return None
        return speaks_for(who)

    def _counted(self, who: Tenant | Grant | Refused) -> Tenant | Grant | Refused:
        if isinstance(who, Refused):
            self.metrics.protocol_error("unauthorized")
        return who

    def authorized(self, conn: HTTPConnection) -> bool:
        """The client presented a valid key or client secret, or none is needed (a refusal
        is counted)."""
        return self.caller(conn) is not None

    def refusal(self, conn: HTTPConnection, key_in_band: bool = False) -> Response | None:
        """Why a streaming client may not start now (origin, key, readiness), or None.

        `key_in_band`: the protocol's codec checks the key in a message instead.
        """
        checked = self._checked(conn, key_in_band)
        return checked if isinstance(checked, Response) else None

    def _checked(self, conn: HTTPConnection, key_in_band: bool) -> Response | Tenant | Grant | None:
        """Why a streaming client may not start now, or whose key or client secret it
        presented (None: its key comes in band, for its codec to check)."""
        origin = self.origin_refusal(conn)
        if origin is not None:
            return origin
        who = None if key_in_band else self._counted(self.credential(conn))
        if isinstance(who, Refused):
            return unauthorized(who.reason)
        if self.state != "ready":
            return text_response(503, f"server is {self.state}\n")
        if is_remote(self.engine) and self.engine is not None and not self.engine.healthy:
            # A gateway with no replica would only queue the session's audio: refuse it,
            # so the load balancer sends the client to a gateway that has one.
            return text_response(503, "no engine replica answers\n")
        return who

    async def _wait_until_ready(self, request: Request) -> None:
        """`/readyz?wait=S` holds the answer until ready (at most S, up to 8), a long poll.

        Deployment scripts and tests then wait on the event itself, not on a polling loop.
        """
        wait_s = readiness_wait(request.query_params.get("wait"))
        if wait_s > 0 and self.state == "starting":
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._ready.wait()

    def _readyz(self) -> Response:
        ready, said = self.readiness()
        return text_response(200 if ready else 503, said + "\n")

    def readiness(self) -> tuple[bool, str]:
        """Whether this process takes sessions now, and /readyz's words for it."""
        engine = self.engine
        engine_ok = engine is not None and engine.healthy
        # A gateway says how many engine replicas answer (none answering: not ready); a
        # worker needs every engine process of its host to answer.
        replicas = engine.snapshot().replicas if is_remote(engine) and engine else None
        answering = "" if replicas is None else f": {len(replicas)} engine replica(s) answer"
        if self.seat is not None and replicas is not None:
            engine_ok = engine_ok and len(replicas) >= self._engines_expected
        if self.state == "ready" and engine_ok:
            return True, f"ready{answering}"
        reason = self.state if self.state != "ready" else "engine unhealthy"
        return False, f"not ready: {reason}{answering}"

    async def _metrics(self) -> Response:
        if self.link is None:
            body = self.local_metrics()
        else:  # every process's series, put together by the supervisor
            gathered = await self.link.gather(Topic.METRICS)
            body = gathered if isinstance(gathered, bytes) else self.local_metrics()
        return response(200, body, "text/plain; version=0.0.4")

    def local_metrics(self) -> bytes:
        """This process's series."""
        self.monitor.snapshot(self._gpu_indices())
        if self.engine is not None:
            self.engine.snapshot()  # brings the engine's queue gauge up to date
        return generate_latest(self.registry)

    async def stats(self) -> dict[str, Any]:
        """JSON for /stats and the web client's engine panel: with workers, the host's
        counts added up and its `processes`."""
        out = self.local_stats()
        if self.link is None:
            return out
        gathered = await self.link.gather(Topic.STATS)
        if isinstance(gathered, Gathered):
            reports = [r for r in gathered.reports if isinstance(r, dict)]
            for name in HOST_COUNTS:
                out[name] = sum(int(r.get(name) or 0) for r in reports)
            out["processes"] = gathered.processes
        return out

    def local_stats(self) -> dict[str, Any]:
        """This process's stats."""
        engine = self.engine
        out: dict[str, Any] = {
            "state": self.state,
            "uptime_s": round(time.monotonic() - self.started, 1),
            "sessions": len(self.sessions),
            "streams": len(self.streams),
            "followers": self.follower_slots.following,
            "waiting_followers": self.follower_slots.waiting,
            "asyncio_tasks": len(asyncio.all_tasks()),
            "test_model": bool(self.report and self.report.test_model),
            "demo_model": bool(self.report and self.report.demo_model),
            "engine": self.report.to_dict() if self.report else None,
            "process": self.monitor.snapshot(self._gpu_indices()),
        }
        if engine is not None:
            out |= engine.snapshot().to_stats()
        return out

    def _gpu_indices(self) -> list[int]:
        """The GPUs the engine runs on here (torch allocator readings touch only those):
        none when the engine is remote replicas."""
        devices = self.report.devices if self.report and not is_remote(self.engine) else ()
        return [device_index(d.device) for d in devices if d.device.startswith("cuda")]

    # ---- WebSocket ----------------------------------------------------------------

    async def hold_while_starting(self) -> None:
        """In a worker that took connections before it was ready (the first worker's first
        start), hold a client until it is, within `STARTING_HOLD_S`.

        The kernel hands such a worker connections meant for the host, whose other workers
        may already say ready: a 503 there would refuse a client of a ready host.
        """
        if self.seat is None or self.state != "starting":
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(STARTING_HOLD_S):
                await self._ready.wait()

    async def websocket(self, websocket: WebSocket, route: WebSocketRoute) -> None:
        """One streaming client on `route`: admit, accept, run its session, clean up."""
        await self.hold_while_starting()
        admitted = self._admit(websocket, route)
        if isinstance(admitted, Response):
            await self._refuse(websocket, admitted)
            return
        codec, claim, grant = admitted
        used_up = None if grant is None else await self._used_up(grant)
        if used_up is not None:
            await self._refuse(websocket, used_up)
            return
        await websocket.accept(
            choose_subprotocol(websocket.scope.get("subprotocols") or []), self._served_by()
        )
        port = SocketPort(websocket)
        port.limit_write_buffer(self.config.limits.send_buffer_bytes or WRITE_BUFFER_BYTES)
        lease = await self.host.acquire(Kind.SESSION, port.peer)
        adopt = partial(self._adopt, route=route, grant=grant)
        if await self._resumed(port, codec, claim, lease, adopt=adopt, grant=grant):
            return
        if isinstance(lease, Scope):
            over = self._over_capacity(lease)
            self.metrics.protocol_error(over.code)
            for frame in codec.encode(ErrorEvent(over.code, over.message)):
                await port.send(frame)
            await port.close(over.close_code, over.code)
            return
        try:
            await self._run_session(port, codec, route, claim, grant=grant)
        finally:
            self.host.release(lease)

    async def _resumed(
        self,
        port: SocketPort,
        codec: Codec,
        claim: Claim,
        lease: int | Scope,
        *,
        adopt: Adopter,
        grant: Grant | None,
    ) -> bool:
        """Whether the connection resumed a stream (or left while looked at): then it is
        served, and its lease given back, as the stream it resumes holds its own place
        (and its client secret's count, which that stream took when it opened). Its first
        message is looked at holding a lease if one fits, so that a session is admitted
        at once; a full server still lets resumes in."""
        try:
            request = await self.resumes.resume_request(port, codec)
        except ClientGone:
            request, gone = None, True
        else:
            gone = False
        if request is None and not gone:
            return False
        if not isinstance(lease, Scope):
            self.host.release(lease)
        if request is not None and isinstance(codec, V1Codec):
            if grant is not None:
                self.host.give_back_token(grant.token_id)
            await self.resumes.take_up(port, codec, claim, request, adopt)
        return True

    async def _used_up(self, grant: Grant, peek: bool = False) -> Response | None:
        """Count a session of the client secret host-wide (with `peek`, only ask whether
        one would be counted), or 403 when it has opened its most."""
        limit, expires = grant.max_sessions, grant.expires_at
        if await self.host.use_token(grant.token_id, limit, expires, time.time(), peek):
            return None
        self.metrics.protocol_error("client_secret_used_up")
        return text_response(403, f"client secret used up: it may open {limit} session(s)\n")

    async def unknown_websocket(self, websocket: WebSocket) -> None:
        """An upgrade at a path that streams nothing: 404, naming the paths that do."""
        paths = streaming_paths(self.routes)
        text = f"no streaming endpoint at {shown_path(websocket)}; streaming paths: {paths}\n"
        await self._refuse(websocket, text_response(404, text))

    async def _refuse(self, websocket: WebSocket, refusal: Response) -> None:
        """Answer an upgrade with `refusal`: every refused handshake leaves here, logged.

        Browsers hide a refused handshake's status and body from the page, so the server's
        log is where an operator sees why a client could not connect.
        """
        reason = bytes(refusal.body).decode(errors="replace").partition("\n")[0]
        for name, value in self._served_by():  # which worker refused, as with an upgrade
            refusal.headers[name.decode()] = value.decode()
        log.info(
            "refused WebSocket %s from %s: %d %s",
            shown_path(websocket),
            client_host(websocket),
            refusal.status_code,
            reason,
        )
        await websocket.send_denial_response(refusal)

    def _served_by(self) -> list[tuple[bytes, bytes]]:
        """The upgrade's header naming the worker that serves it (tests pin on it)."""
        if self.seat is None:
            return []
        return [(b"x-sensestream-worker", str(self.seat.worker).encode())]

    def _admit(
        self, websocket: WebSocket, route: WebSocketRoute
    ) -> tuple[Codec, Claim, Grant | None] | Response:
        """The connection's codec, whose it is and the client secret it came with, or the
        HTTP answer that refuses its upgrade.

        A route whose key comes in band learns its tenant when its codec checks that key
        (a key: client secrets are for pages, and in-band keys are telephony platforms').
        """
        who = self._checked(websocket, route.key_in_band)
        if isinstance(who, Response):
            return who
        if self.engine is None or self.vad is None or self.report is None:
            return text_response(503, "server is not ready\n")
        grant = who if isinstance(who, Grant) else None
        claim = Claim(self.keys, None if who is None else speaks_for(who))
        pins = grant.pins if grant is not None else Pins()
        try:
            codec = route.make_codec(self._handshake(websocket), self.codec_settings(claim, pins))
        except ProtocolError as exc:  # the handshake itself is refused (a bad signature)
            self.metrics.protocol_error(exc.code)
            status = HANDSHAKE_REFUSALS.get(exc.code, 400)
            return text_response(status, exc.message + "\n")
        return codec, claim, grant

    def codec_settings(self, claim: Claim, pins: Pins | None = None) -> CodecSettings:
        """What a connection's codec is made with: limits, the key check (which records
        the key's tenant in `claim`; a refusal is counted where the codec's error ends
        the session), the Twilio secret, what its client secret pins."""
        return CodecSettings(
            self.config.limits.session_limits(),
            claim.check,
            self.config.listen.twilio_auth_token,
            self.config.listen.audiohook_secret(),
            pins or Pins(),
            self.hotword_refusal,
        )

    def _handshake(self, websocket: WebSocket) -> Handshake:
        query = websocket.query_params
        url = websocket.url
        public = self.config.listen.public_url
        if public:  # behind a proxy, the signed URL is the public one
            base = public.rstrip("/").replace("https://", "wss://").replace("http://", "ws://")
            full = base + url.path + (f"?{url.query}" if url.query else "")
        else:
            full = str(url)
        return Handshake(
            {k: query.getlist(k) for k in query},
            {k.lower(): v for k, v in websocket.headers.items()},
            full,
        )

    def session_config(self) -> SessionConfig:
        """Every session's settings (the engine report names the model)."""
        if self._session_config is None:
            raise RuntimeError("no session before the engine is ready")
        return self._session_config

    async def _adopt(
        self,
        port: Port,
        codec: Codec,
        claim: Claim,
        adopted: Adopted,
        *,
        route: WebSocketRoute,
        grant: Grant | None,
    ) -> None:
        """Go on with a stream a retiring worker handed over. It was admitted once: its
        place here is taken over the limits (its old worker's goes as that one exits)."""
        lease = await self.host.acquire(Kind.SESSION, port.peer, force=True)
        try:
            await self._run_session(port, codec, route, claim, grant=grant, adopted=adopted)
        finally:
            if not isinstance(lease, Scope):
                self.host.release(lease)

    async def _run_session(
        self,
        port: Port,
        codec: Codec,
        route: WebSocketRoute,
        claim: Claim,
        *,
        grant: Grant | None = None,
        adopted: Adopted | None = None,
    ) -> None:
        if self.engine is None or self.vad is None or self.report is None:
            return
        session_id = uuid.uuid4().hex[:12] if adopted is None else adopted.adoption.session_id
        config = self.session_config()
        if self.vad_pump is not None:
            config = replace(config, defer_vad=True)
        if grant is not None:  # the session core makes every Configure obey the pins
            config = replace(config, pinned=grant.pins)
        session = SessionCore(session_id, config, self.vad)
        conn = Connection(
            port,
            codec,
            session,
            self.engine,
            self.metrics,
            max_pending_events=self.config.limits.max_pending_events,
            idle_timeout_s=self.config.limits.idle_timeout_s,
            publisher=Publisher(
                self.streams, session_id, route.protocol, time.time(), self.webhooks, claim=claim
            ),
            start_deadline_s=START_DEADLINE_S if route.key_in_band else None,
            vad_pump=self.vad_pump,
            resuming=(
                self.resumes.resuming(codec, claim, session_id)
                if adopted is None
                else adopted.resuming
            ),
            adoption=None if adopted is None else adopted.adoption,
        )
        self.sessions[session_id] = conn
        self.metrics.connections.inc()
        self.metrics.sessions.set(len(self.sessions))
        try:
            await conn.run()
        finally:
            self.sessions.pop(session_id, None)
            self.metrics.sessions.set(len(self.sessions))
            if isinstance(codec, TwilioCodec):
                self.metrics.twilio_placement(session_id, codec.stats)

    # ---- subscribers ----------------------------------------------------------------

    async def streams_route(self, request: Request) -> Response:
        """GET /v1/streams: the live streams a subscriber may follow (its tenant's; an
        admin key's: every tenant's; a client secret's only with `streams:read`)."""
        refusal = self.origin_refusal(request)
        if refusal is not None:
            return refusal
        caller = scoped(self._counted(self.credential(request)), STREAMS_READ)
        if isinstance(caller, Response):
            return caller
        return json_response(200, {"streams": await self.host.streams(caller)})

    async def follow(self, websocket: WebSocket) -> None:
        """WS /v1/streams/{id}/events: a live stream's events, from now, after its finals."""
        await self.hold_while_starting()
        sub = await self._subscription(websocket)
        if isinstance(sub, Response):
            await self._refuse(websocket, sub)
            return
        try:
            await websocket.accept(headers=self._served_by())
            port = SocketPort(websocket)
            port.limit_write_buffer(self.config.limits.send_buffer_bytes or WRITE_BUFFER_BYTES)
            await Follower(port, sub, self.streams).run()
        finally:
            self.follower_slots.unsubscribe(sub)

    async def _subscription(self, websocket: WebSocket) -> Subscription | Response:
        """A new follower of the stream the path names, or why it may not follow.

        `?wait=S` (up to 30 s) holds the handshake until a stream that has not started yet
        does: a follower that starts with the call need not race it.
        """
        peer = client_host(websocket)
        refusal = self.refusal(websocket) or await self.follower_slots.refusal(peer)
        if refusal is not None:
            return refusal
        stream_id = websocket.path_params["stream_id"]
        key = self._followed_key(websocket, stream_id)
        if isinstance(key, Response):
            return key
        wait_s = readiness_wait(websocket.query_params.get("wait"), FOLLOW_WAIT_CAP_S)
        return await self.follower_slots.follow(key, wait_s, peer, stream_id)

    def _followed_key(self, conn: HTTPConnection, stream_id: str) -> str | Response:
        """The hub key of the stream a follower names: its own tenant's stream of that id,
        or, for an admin key, the one of the tenant `?tenant=` names."""
        caller = scoped(self.credential(conn), STREAMS_READ)  # refusal() counted a 401
        if isinstance(caller, Response):
            return caller
        key = followed_key(caller, stream_id, conn.query_params.get("tenant"))
        if key is None:
            return text_response(403, "only an admin key may follow another tenant's stream\n")
        return key

    def _over_capacity(self, scope: Scope) -> ServerFullError:
        limits = self.config.limits
        if scope is Scope.TOTAL:
            return ServerFullError(f"server is at its limit of {limits.max_sessions} sessions")
        return ServerFullError(
            f"this address already has {limits.max_sessions_per_ip} sessions open"
        )


#: How long a starting worker holds a client that the kernel handed it (see
#: `App.hold_while_starting`); clients' own handshake timeouts are about 10 s.
STARTING_HOLD_S = 10.0

#: How soon a protocol that carries its key in its first message (Twilio) must send it.
START_DEADLINE_S = 10.0

#: The longest a follower's handshake waits for its stream to start.
FOLLOW_WAIT_CAP_S = 30.0

#: What may wait in user space for one WebSocket client before sends wait (asyncio's own
#: default is 64 KiB; --send-buffer-bytes sets both this and the kernel's buffer).
WRITE_BUFFER_BYTES = 32 * 1024

#: The HTTP status refusing a handshake a codec's factory rejects, by error code: Twilio
#: answers a bad X-Twilio-Signature with 403; Genesys expects 401 for a bad signature.
HANDSHAKE_REFUSALS = {"unauthorized": 403, "bad_signature": 401}

#: Subprotocols clients insist on: FunASR's clients ask for "binary", OpenAI's browser
#: clients for "realtime" (a browser drops a socket whose server picks none it offered).
SUBPROTOCOLS = ("binary", "realtime")


def choose_subprotocol(offered: list[str]) -> str | None:
    return next((name for name in SUBPROTOCOLS if name in offered), None)


#: How much of a request's path a refusal repeats (its body and its log line).
SHOWN_PATH_CHARS = 200


def shown_path(conn: HTTPConnection) -> str:
    """The request's path, cut short and escaped where it is not printable (a %0A in it
    must not start a forged log line)."""
    path = conn.url.path[:SHOWN_PATH_CHARS]
    return path if path.isprintable() else path.encode("unicode_escape").decode("ascii")


#: The /stats counts that add up across a host's workers.
HOST_COUNTS = ("sessions", "streams", "followers", "waiting_followers")

#: The longest /readyz long poll.
READY_WAIT_CAP_S = 8.0


def readiness_wait(value: str | None, cap_s: float = READY_WAIT_CAP_S) -> float:
    """The `wait` query parameter of /readyz in seconds (0 when absent or malformed)."""
    try:
        wait_s = float(value) if value else 0.0
    except ValueError:
        return 0.0
    return min(max(wait_s, 0.0), cap_s) if math.isfinite(wait_s) else 0.0


RANDOM_WEIGHTS_BANNER = """
################################################################################
#  RANDOM WEIGHTS: this server runs a TEST model built by make_test_model.py.   #
#  Transcripts are meaningless. Pass --model with real SenseVoiceSmall weights. #
################################################################################"""

DEMO_MODEL_BANNER = """
################################################################################
#  DEMO MODEL: trained on synthetic English speech, with a small vocabulary.   #
#  It does not know human speech: pass --model with real SenseVoiceSmall.      #
################################################################################"""
