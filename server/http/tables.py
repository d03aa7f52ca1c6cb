"""The HTTP and WebSocket route tables of the serving port and of the metrics port."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from server.config import ServerConfig
from server.http.routes import FOLLOW_PATH
from server.http.routes import WebSocketRoute as StreamRoute


class FileRoutes(Protocol):
    async def models(self, request: Request) -> Response: ...
    async def transcriptions(self, request: Request) -> Response: ...


class SecretRoutes(Protocol):
    async def create(self, request: Request) -> Response: ...


class App(Protocol):
    """What the route tables need of the app they route to (`server.app.App`, which sits
    above this package and is not imported here)."""

    @property
    def config(self) -> ServerConfig: ...
    @property
    def routes(self) -> Mapping[str, StreamRoute]: ...
    @property
    def file_api(self) -> FileRoutes: ...
    @property
    def client_secret_api(self) -> SecretRoutes: ...
    async def websocket(self, websocket: WebSocket, route: StreamRoute) -> None: ...
    async def stream_probe(self, request: Request, key_in_band: bool = False) -> Response: ...
    async def follow(self, websocket: WebSocket) -> None: ...
    async def unknown_websocket(self, websocket: WebSocket) -> None: ...
    async def healthz(self, request: Request) -> Response: ...
    async def readyz(self, request: Request) -> Response: ...
    async def metrics_route(self, request: Request) -> Response: ...
    async def stats_route(self, request: Request) -> Response: ...
    async def streams_route(self, request: Request) -> Response: ...
    async def page(self, request: Request) -> Response: ...


def _stream(app: App, route: StreamRoute) -> list[BaseRoute]:
    async def endpoint(websocket: WebSocket) -> None:
        await app.websocket(websocket, route)

    async def probe(request: Request) -> Response:
        return await app.stream_probe(request, route.key_in_band)

    # A plain GET gets what the handshake would (the page asks why a socket was refused:
    # browsers hide a refused handshake's status), or 426 when it would be admitted.
    routes: list[BaseRoute] = [WebSocketRoute(route.path, endpoint, name=route.protocol)]
    if route.probe:
        routes.append(Route(route.path, probe))
    return routes


def _health(app: App) -> list[BaseRoute]:
    # Health stays on the serving port (load balancers probe the port they route to).
    return [Route("/healthz", app.healthz), Route("/readyz", app.readyz)]


def _ops(app: App) -> list[BaseRoute]:
    return [Route("/metrics", app.metrics_route), Route("/stats", app.stats_route)]


def main_app(app: App) -> Starlette:
    """Streaming, the page, health, and (without a metrics port) metrics and stats."""
    routes: list[BaseRoute] = [r for route in app.routes.values() for r in _stream(app, route)]
    routes += _health(app)
    routes += [
        Route("/v1/streams", app.streams_route),
        WebSocketRoute(FOLLOW_PATH, app.follow, name="follow"),
        Route("/v1/models", app.file_api.models),
        Route("/v1/audio/transcriptions", app.file_api.transcriptions, methods=["POST"]),
        Route("/v1/realtime/client_secrets", app.client_secret_api.create, methods=["POST"]),
    ]
    if app.config.listen.metrics_port is None:
        routes += _ops(app)
    routes.append(Route("/{path:path}", app.page))
    # Last, so it takes only upgrades no route above matched: Starlette's own answer to
    # those is a bare 403, which reads as a key or Origin problem and is never logged.
    routes.append(WebSocketRoute("/{path:path}", app.unknown_websocket, name="unknown"))
    return Starlette(routes=routes)


def ops_app(app: App) -> Starlette:
    """/metrics, /stats and health on their own address, e.g. a private interface."""
    return Starlette(routes=_health(app) + _ops(app))
