"""The WebSocket route table: each path speaks one protocol through its codec."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from streaming.limits import SessionLimits
from streaming.protocols.base import Codec, Handshake
from streaming.protocols.funasr import FunasrCodec
from streaming.protocols.openai_realtime import OpenAIRealtimeCodec
from streaming.protocols.v1 import V1Codec


@dataclass(frozen=True, slots=True)
class WebSocketRoute:
    """A path and how to make a fresh codec for each connection on it."""

    path: str
    protocol: str
    make_codec: Callable[[Handshake, SessionLimits], Codec]

    def max_message_bytes(self, limits: SessionLimits) -> int:
        """The largest message this route's codec takes under `limits`."""
        return self.make_codec(Handshake(), limits).max_message_bytes


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
