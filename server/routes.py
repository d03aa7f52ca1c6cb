"""The WebSocket route table: each path speaks one protocol through its codec."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from streaming.limits import SessionLimits
from streaming.protocols.base import Codec, Handshake
from streaming.protocols.funasr import FunasrCodec
from streaming.protocols.openai_realtime import OpenAIRealtimeCodec
from streaming.protocols.v1 import V1Codec

Query = Mapping[str, list[str]]


@dataclass(frozen=True, slots=True)
class WebSocketRoute:
    """A path and how to make a fresh codec for each connection on it."""

    path: str
    protocol: str
    make_codec: Callable[[Handshake, SessionLimits], Codec]


def _v1(handshake: Handshake, limits: SessionLimits) -> Codec:
    return V1Codec(limits)


def _funasr(handshake: Handshake, limits: SessionLimits) -> Codec:
    return FunasrCodec(limits)


def websocket_routes() -> dict[str, WebSocketRoute]:
    """Every streaming endpoint, by path."""
    routes = (
        WebSocketRoute("/ws", "v1", _v1),
        WebSocketRoute("/funasr", "funasr", _funasr),
        WebSocketRoute("/v1/realtime", "openai-realtime", OpenAIRealtimeCodec),
    )
    return {route.path: route for route in routes}


def split_path(target: str) -> tuple[str, Query]:
    """A request target's path and its query parameters."""
    parts = urlsplit(target)
    return parts.path, parse_qs(parts.query)
