"""What the server needs of a protocol codec: messages to commands, events to messages."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from streaming.commands import Command, HotwordRefusal, writes_any
from streaming.errors import ProtocolError
from streaming.events import SessionEvent
from streaming.limits import SessionLimits
from streaming.pins import Pins

#: A WebSocket message: str goes as a text frame, bytes as a binary frame.
Frame = str | bytes


@dataclass(frozen=True, slots=True)
class Handshake:
    """What a codec may learn from the opening request: its query and headers."""

    query: Mapping[str, Sequence[str]] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)  # names in lower case
    # The URL the client asked for, as the server's public address names it (scheme, host,
    # path and query): what a signed handshake (Twilio's X-Twilio-Signature) signs.
    url: str = ""

    def param(self, name: str) -> str | None:
        """The first value of a query parameter, or None."""
        values = self.query.get(name)
        return values[0] if values else None


def _any_key(key: str | None) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class CodecSettings:
    """What the server tells every codec it makes: limits, and how to check secrets.

    `check_key` judges an API key a protocol carries in its messages (a platform that
    cannot set headers); it says True for any key when the server has none.
    `twilio_auth_token`, when set, is the secret Twilio signs its handshakes with;
    `audiohook_client_secret` the one Genesys signs AudioHook's with. `pinned`: what the
    connection's credential (a client secret) fixes; the session core enforces it, and a
    codec whose protocol announces its settings (OpenAI's) starts from it.
    """

    limits: SessionLimits = field(default_factory=SessionLimits)
    check_key: Callable[[str | None], bool] = _any_key
    twilio_auth_token: str | None = None
    audiohook_client_secret: bytes | None = None
    pinned: Pins = field(default_factory=Pins)
    # Why the model cannot write some hotwords: a codec that reports its settings back
    # (OpenAI's) refuses an update with them before taking it; the core refuses for all.
    hotword_refusal: HotwordRefusal = writes_any


class Codec(Protocol):
    """One connection's translator between a wire protocol and the session core.

    Codecs are stateful per connection (item ids, text already sent) and never do I/O.
    """

    @property
    def max_message_bytes(self) -> int:
        """The WebSocket library's hard cap for one incoming message on this route."""
        ...

    @property
    def end_grace_s(self) -> float:
        """After a normal end's last message, how long the client may take to close first."""
        ...

    def opening(self) -> Sequence[Command]:
        """Commands implied by the connection itself, before any client message."""
        ...

    def decode(self, message: Frame) -> Sequence[Command]:
        """One client message as commands; raises ProtocolError for a bad one."""
        ...

    def encode(self, event: SessionEvent) -> Sequence[Frame]:
        """The messages that carry one event to this client (possibly none)."""
        ...

    def is_fatal(self, error: ProtocolError) -> bool:
        """Whether this protocol ends the stream on the error, or reports it and goes on."""
        ...

    def close_code(self, error: ProtocolError) -> int:
        """The WebSocket close code that ends a stream after this client error."""
        ...


@runtime_checkable
class HandsOff(Protocol):
    """A codec whose protocol can ask its client to go on with the session on a new
    connection (AudioHook's `reconnect`), which it sends for a `HandOff` event."""

    @property
    def can_hand_off(self) -> bool:
        """Whether the session can be handed off now (it is open, and not ending)."""
        ...
