"""Twilio Media Streams at `/twilio`: a phone call's audio, one or both parties, from Twilio.

Twilio opens the WebSocket and sends JSON text frames: `connected`, `start` (the call, its
tracks, its `customParameters`), `media` (one track's base64 μ-law, 8 kHz, 20 ms a
chunk, stamped with milliseconds since the stream started), `dtmf`, `mark`, and `stop`.
It reads nothing back on a `<Start>` stream and only its own playback messages on a
`<Connect>` one, so this codec sends nothing: the transcript is for subscribers, who
follow the stream at `/v1/streams/{CallSid}/events` (its stream id is the call's SID).

With both tracks, `inbound` (the caller) is channel 0 and `outbound` (who the call
reaches, or what Twilio plays) is channel 1, each recognised on its own; one track is a
mono stream. Audio is placed by its timestamp (twilio_jitter): gaps become silence,
duplicate and late chunks are dropped and counted (`duplicates`, `late`), and a chunk whose
timestamp is out of range is placed after its track's audio and counted (`misplaced`).

Setting it up. Twilio's stream URL takes no query string, so the API key rides in a
`<Parameter>`; `language`, `pace` and the flags `itn`, `partials`, `emotion`, `event`,
`timestamps` (true/false) may be set the same way, and other parameters are ignored::

    <Response>
      <Start>
        <Stream url="wss://asr.example.com/twilio" track="both_tracks">
          <Parameter name="api_key" value="YOUR-SENSESTREAM-KEY"/>
          <Parameter name="language" value="en"/>
        </Stream>
      </Start>
      <Dial>+15551230000</Dial>
    </Response>

A wrong or missing key (when the server has keys) ends the stream at `start`, before any
audio is decoded. With `--twilio-auth-token` (SENSESTREAM_TWILIO_AUTH_TOKEN) set, the
handshake must carry Twilio's X-Twilio-Signature for this URL, or it is refused with 403;
behind a proxy that terminates TLS, `--public-url https://asr.example.com` names the URL
Twilio signed.

Errors. Twilio cannot read a reply, so an error only decides whether the call's
recognition goes on. Before `start` every error ends the stream: the peer has not shown a
key, and nothing can be recognised without the call's format. So an unkeyed peer may send
one `connected` and then `start`, nothing else (each message would restart the server's
idle timer), and no message may be over MAX_MESSAGE_BYTES. After `start`, one bad message
(bad JSON, an unknown event, bad base64, a bad field, media after `stop`) is dropped and
counted (`rejected`, and the server's protocol-error metric), and its hole becomes silence:
one corrupt chunk must not cost the rest of a call, and Twilio may add events. A
`connected` after `start` is such a message. An oversized message, and what the session core raises
(the rate and duration limits), still end the stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from streaming.audio.decoder import AudioFormat
from streaming.commands import Audio, Command, Configure, Stop
from streaming.errors import (
    FrameTooLargeError,
    InvalidAudioError,
    InvalidFieldError,
    MalformedMessageError,
    ProtocolError,
    StateError,
    UnauthorizedError,
    UnknownMessageTypeError,
)
from streaming.events import SessionEvent
from streaming.protocols.base import Codec, CodecSettings, Frame, Handshake
from streaming.protocols.json_text import load_object
from streaming.protocols.twilio.jitter import JitterConfig, JitterStats, Placed, Timeline
from streaming.protocols.twilio.messages import (
    RATE,
    StartInfo,
    api_key,
    parse_media,
    parse_start,
    section,
)
from streaming.protocols.twilio.signature import check_handshake

#: A media frame is ~300 bytes of JSON and `start` a few KiB. Checked here: the server's
#: WebSocket cap is the largest any route needs.
MAX_MESSAGE_BYTES = 64 * 1024
EVENTS = ("connected", "start", "media", "dtmf", "mark", "stop")
#: Errors one message of a started stream may cause without ending it (see above).
FORGIVABLE = (
    MalformedMessageError,
    UnknownMessageTypeError,
    InvalidFieldError,
    InvalidAudioError,
    StateError,
)


class Phase(Enum):
    """Where a connection's stream is."""

    WAITING = "waiting"  # for `start`
    STREAMING = "streaming"
    STOPPED = "stopped"


class TwilioCodec:
    """Twilio Media Streams for one connection: `start`'s key and tracks, placed media."""

    def __init__(self, settings: CodecSettings, jitter: JitterConfig | None = None) -> None:
        self._settings = settings
        self._jitter = jitter or JitterConfig()
        self._phase = Phase.WAITING
        self._connected = False  # whether `connected` came
        self._tracks: tuple[str, ...] = ()
        self._timeline: Timeline | None = None
        self._forgiven: ProtocolError | None = None  # the error decode just let pass
        self.call: StartInfo | None = None  # what `start` said
        self.rejected = 0  # messages dropped for an error after `start`
        self.dtmf = 0
        self.marks = 0

    @property
    def max_message_bytes(self) -> int:
        return MAX_MESSAGE_BYTES

    @property
    def end_grace_s(self) -> float:
        return 0.0  # Twilio closes after `stop` by itself and reads nothing before

    @property
    def stats(self) -> JitterStats:
        """Placement so far: duplicates, late and misplaced chunks, silence, clock steps."""
        return self._timeline.stats if self._timeline is not None else JitterStats()

    @property
    def duplicates(self) -> int:
        """Chunks dropped because their timestamp was already taken."""
        return self.stats.duplicates

    @property
    def late(self) -> int:
        """Chunks dropped because their place had been played out (as silence)."""
        return self.stats.late

    def opening(self) -> Sequence[Command]:
        return ()  # nothing is known before `start`

    def decode(self, message: Frame) -> Sequence[Command]:
        try:
            return self._decode(message)
        except FORGIVABLE as exc:
            if self._phase is not Phase.WAITING:
                self._forgiven = exc
                self.rejected += 1
            raise

    def encode(self, event: SessionEvent) -> Sequence[Frame]:
        return ()  # Twilio reads no replies; results go to the stream's subscribers

    def is_fatal(self, error: ProtocolError) -> bool:
        forgiven, self._forgiven = self._forgiven, None  # no reference kept to a traceback
        return error is not forgiven

    def close_code(self, error: ProtocolError) -> int:
        return error.close_code

    # ---- decoding -----------------------------------------------------------------

    def _decode(self, message: Frame) -> Sequence[Command]:
        size = message_size(message)
        if size > MAX_MESSAGE_BYTES:
            raise FrameTooLargeError(
                f"message over the {MAX_MESSAGE_BYTES} byte limit (at least {size} bytes)"
            )
        if isinstance(message, bytes):
            raise MalformedMessageError("Twilio Media Streams sends JSON text frames, not binary")
        obj = load_object(message, "Twilio message")
        event = obj.get("event")
        if not isinstance(event, str):
            raise UnknownMessageTypeError("message has no string `event` field")
        if event not in EVENTS:
            raise UnknownMessageTypeError(f"unknown event {event!r}; expected {', '.join(EVENTS)}")
        if event == "connected":
            return self._connected_once()
        if event == "start":
            return self._start(section(obj, "start"))
        if self._phase is Phase.WAITING:
            raise StateError(f"{event} before start: the stream has not started")
        if event == "media":
            return self._media(section(obj, "media"))
        if event == "stop":
            return self._stop()
        if event == "dtmf":
            self.dtmf += 1
        else:
            self.marks += 1
        return ()

    def _connected_once(self) -> Sequence[Command]:
        # Before `start` the peer is unkeyed: a repeat would only keep its socket open.
        if self._connected or self._phase is not Phase.WAITING:
            raise StateError("connected may only come once, before start")
        self._connected = True
        return ()

    def _start(self, body: dict[str, object]) -> list[Command]:
        if self._phase is not Phase.WAITING:
            raise StateError("start may only come once")
        # The key first: a client without one learns nothing about the rest of its message.
        if not self._settings.check_key(api_key(body)):
            raise UnauthorizedError(
                "missing or wrong API key: set it in the stream's customParameters.api_key"
            )
        info = parse_start(body)
        channels = len(info.tracks)
        labels = info.tracks if channels > 1 else ()
        command = Configure(
            AudioFormat("mulaw", RATE, channels),
            info.options,
            labels,
            info.call_sid,
            info.webhook_url,
        )
        self.call, self._tracks = info, info.tracks
        self._timeline = Timeline(channels, self._jitter)
        self._phase = Phase.STREAMING
        return [command]

    def _media(self, body: dict[str, object]) -> list[Command]:
        if self._phase is Phase.STOPPED:
            raise StateError("media after stop")
        chunk = parse_media(body)
        track = chunk.track or self._tracks[0]
        if chunk.track is None and len(self._tracks) > 1:
            raise InvalidFieldError("media.track is needed: this stream has both tracks")
        if track not in self._tracks:
            raise InvalidFieldError(f"media for the {track} track, which start did not name")
        return self._audio(
            self._placer().push(self._tracks.index(track), chunk.timestamp_ms, chunk.payload)
        )

    def _stop(self) -> list[Command]:
        if self._phase is Phase.STOPPED:
            return []  # a repeated stop changes nothing
        self._phase = Phase.STOPPED
        return [*self._audio(self._placer().flush()), Stop()]

    def _audio(self, placed: list[Placed]) -> list[Command]:
        """Each track's audio for its own channel (a mono stream's audio has no channel)."""
        if len(self._tracks) == 1:
            return [Audio(p.data) for p in placed]
        return [Audio(p.data, channel=p.track) for p in placed]

    def _placer(self) -> Timeline:
        if self._timeline is None:
            raise StateError("the stream has not started")
        return self._timeline


def message_size(message: Frame) -> int:
    """A frame's size in bytes, text as UTF-8 (a lower bound when it is over the cap anyway)."""
    if isinstance(message, bytes) or len(message) > MAX_MESSAGE_BYTES:
        return len(message)  # text of more characters than the cap is more bytes too
    return len(message.encode())


def make_twilio_codec(handshake: Handshake, settings: CodecSettings) -> Codec:
    """A codec for one Twilio connection; a handshake Twilio did not sign is refused."""
    token = settings.twilio_auth_token
    if token:
        check_handshake(handshake, token)
    return TwilioCodec(settings)
