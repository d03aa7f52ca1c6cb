"""The WebSocket route table: each path speaks one protocol through its codec."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from streaming.protocols.audiohook.codec import make_audiohook_codec
from streaming.protocols.base import Codec, CodecSettings, Handshake
from streaming.protocols.funasr.codec import FunasrCodec
from streaming.protocols.openai.realtime import OpenAIRealtimeCodec
from streaming.protocols.twilio.codec import make_twilio_codec
from streaming.protocols.v1.codec import V1Codec

#: Where a subscriber follows a live stream's events (the app's own route, no codec's).
FOLLOW_PATH = "/v1/streams/{stream_id}/events"


@dataclass(frozen=True, slots=True)
class WebSocketRoute:
    """A path and how to make a fresh codec for each connection on it.

    `make_codec` may raise a ProtocolError to refuse the handshake itself (a bad
    signature). `key_in_band`: the protocol carries its API key in a message, which its
    codec checks, so the upgrade is not asked for one. `probe`: a plain GET of the path
    answers as the handshake would (not where the path serves a page).
    """

    path: str
    protocol: str
    make_codec: Callable[[Handshake, CodecSettings], Codec]
    key_in_band: bool = False
    probe: bool = True

    def max_message_bytes(self, settings: CodecSettings) -> int:
        """The largest message this route's codec takes under `settings`' limits."""
        return self.make_codec(Handshake(), CodecSettings(settings.limits)).max_message_bytes


def _v1(handshake: Handshake, settings: CodecSettings) -> Codec:
    return V1Codec(settings.limits)


def _funasr(handshake: Handshake, settings: CodecSettings) -> Codec:
    return FunasrCodec(settings.limits)


def _openai(handshake: Handshake, settings: CodecSettings) -> Codec:
    return OpenAIRealtimeCodec(
        handshake,
        settings.limits,
        pinned=settings.pinned,
        hotword_refusal=settings.hotword_refusal,
    )


def websocket_routes() -> dict[str, WebSocketRoute]:
    """Every streaming endpoint, by path."""
    routes = (
        WebSocketRoute("/ws", "v1", _v1),
        WebSocketRoute("/funasr", "funasr", _funasr),
        # FunASR's own clients connect to ws://HOST:PORT with no way to add a path (the
        # html5 page's default is wss://HOST:10095/): an upgrade at / speaks their
        # protocol, while a plain GET of / is still the page.
        WebSocketRoute("/", "funasr", _funasr, probe=False),
        WebSocketRoute("/v1/realtime", "openai-realtime", _openai),
        # Twilio cannot set headers or a query string: the key rides in `start`.
        WebSocketRoute("/twilio", "twilio", make_twilio_codec, key_in_band=True),
        WebSocketRoute("/audiohook", "audiohook", make_audiohook_codec),
    )
    return {route.path: route for route in routes}


def streaming_paths(routes: Mapping[str, WebSocketRoute]) -> str:
    """Every WebSocket path and what it speaks, for a client that knocked at another one."""
    listed = [f"{route.path} ({route.protocol})" for route in routes.values()]
    return ", ".join([*listed, f"{FOLLOW_PATH} (follow)"])
