"""Genesys Cloud AudioHook (protocol v2) at `/audiohook`: a sans-I/O codec.

Genesys (the client) opens the socket with its API key in `X-API-KEY` (checked at the
upgrade, as every key header is) and an `open` message offering media formats; the server
answers `opened` with the one it takes, preferring stereo PCMU at 8 kHz, the call's two
sides apart: `external` (the customer) and `internal` (the agent), as channel labels in
the order offered. The stream is named by the `conversationId` (a probe's null id names
none). Binary frames then carry headerless μ-law, channels interleaved. Client text
messages must count `seq` up by exactly one from 1, and every server message counts its
own `seq` from 1 and echoes in `clientseq` the last client seq seen (a `pong`, the
`ping`'s). `ping` gets `pong`. `paused`/`resumed` (Genesys pauses; this server never asks
to) stop and restart the audio: a pause ends the utterances in progress where it falls,
and a repeated `paused` changes nothing; audio while paused is an error. `discarded`
reports audio the client dropped. Positions count both gaps (see `audiohook_timeline`):
a pause's is filled with silence (a few seconds at most), a discard's is not, since the
client may go on sending without a gap. `update` ends the utterances in progress where
it falls and may change the language of the next ones (tags must be BCP 47 in shape, as
they are echoed in transcripts). So do Genesys' reference server and its API test
suite. `error`,
`dtmf`, `playback_started` and `playback_completed` change nothing. `close` ends the
stream, and `closed` goes out after every owed final; the client then closes the socket.
Finals go back as transcript events (see `audiohook_transcript`); partials are not sent
(Genesys uses final transcripts only).

Every error ends the session, as AudioHook's reference server does: a `disconnect` with
reason `error` (`unauthorized` for a refused key) and the error, cut to MAX_INFO_CHARS, as
its `info`, then the close. A server shutdown ends it with a `disconnect` of reason
`completed`, unless the client has already sent `close` (then `closed` answers it). After
a `disconnect` no `closed` is sent: the reference server, too, sends `closed` only from
its closing state. With a client secret, the handshake's signature is checked before the
upgrade (`audiohook_signature`).

A server about to restart may hand a session off (`AudioHookCodec.hand_off`): the
`reconnect` message asks the client to continue the session on a new connection. The
stream goes on meanwhile; the client opens a new session naming this one in
`continuedSessions` and closes this one (`close`, reason `reconnect`: the protocol's
types have that reason, and a close with it is the client's like any other), which
`closed` answers after the owed finals, as any close. A session handed off that ends before the
client closes it (the server could wait no longer) did not move: it ends with the
`disconnect` a drain sends, so the client knows it is over. A new session's `open` that
continues earlier ones is read (`AudioHookCodec.continues`); its transcript offsets are
positions as the client counts them on the new session, from the `open`'s own `position`
(Genesys' reference client starts each session's at zero). The `conversationId` names
the stream, but not a continued session's: the session it continues holds that name
until the client closes it, so a continued session's stream is named by its own session
id.
Genesys Cloud itself says it does not yet re-establish sessions: such a client costs the
server its wait (`--hand-off-s`), then ends as without a hand-off. Not supported:
server-asked pause and resume, L16 audio.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from streaming.audio.decoder import AudioFormat
from streaming.commands import Audio, Command, Configure, Cut, Mark, Stop, StreamOptions
from streaming.errors import (
    InvalidAudioError,
    InvalidFieldError,
    ProtocolError,
    StateError,
    UnknownMessageTypeError,
)
from streaming.events import Configured, Ended, ErrorEvent, HandOff, Marked, SessionEvent
from streaming.events import Final as FinalEvent
from streaming.limits import SessionLimits
from streaming.protocols.audiohook.messages import (
    CLIENT_TYPES,
    CLOSE_REASONS,
    MAX_TEXT_BYTES,
    NOTE_TYPES,
    NULL_UUID,
    RATE,
    ClientMessage,
    ContinuedSession,
    Media,
    choose_media,
    count_field,
    duration_field,
    language_field,
    read_client_message,
    read_open,
    server_message,
    uuid_field,
)
from streaming.protocols.audiohook.signature import check_handshake
from streaming.protocols.audiohook.timeline import Timeline
from streaming.protocols.audiohook.transcript import (
    SUPPORTED_LANGUAGES,
    language_tag,
    stream_language,
    transcript_entity,
    transcript_id,
)
from streaming.protocols.base import Codec, CodecSettings, Frame, Handshake

#: After `closed` the client closes the socket; it gets this long to do it first.
CLIENT_CLOSE_GRACE_S: Final = 5.0
#: The longest gap of a pause filled with silence, so the stream's own times (what
#: subscribers see) stay AudioHook's positions across short pauses. The decoder,
#: resampler and VAD run on the fill in one step of the event loop, ~13 ms of one core per
#: second of stereo (FSMN VAD, a 2-vCPU Xeon), so a fill holds the loop ~40 ms. Beyond it
#: the gap is skipped, and transcript offsets still count it (see the timeline). Fill is
#: audio to the session's pace (2x real time and a 5 s burst by default), so a client
#: repeating pauses is paced as one sending audio too fast would be.
MAX_FILL_S: Final = 3
#: The longest `info` a `disconnect` carries: an error may quote a long client value.
MAX_INFO_CHARS: Final = 1000
#: μ-law's code for a zero sample.
SILENCE: Final = b"\xff"
#: What a hand-off's `reconnect` tells the client, unless the server says otherwise.
HAND_OFF_INFO: Final = "the server is restarting: continue this session on a new connection"


@dataclass(frozen=True, slots=True)
class _Reply:
    """What the `Configured` answering one of the codec's Configures is sent as."""

    kind: str | None  # "opened", or None (an update: no reply)
    clientseq: int  # the seq of the message it answers
    parameters: Mapping[str, Any]


class AudioHookCodec:
    """One AudioHook session: client messages to commands, events to server messages.

    The core answers every Configure with one Configured, in order: `_replies` pairs
    each with what it answers (`opened`, or nothing for an update). A `ping` is a `Mark`
    whose `Marked`, in order with the stream's events, is sent as its `pong`. The
    connection may ask the client to move the session elsewhere (`hand_off`), and learns
    from `continues` which earlier sessions a new one goes on from.
    """

    def __init__(self, limits: SessionLimits, session_id: str | None = None) -> None:
        self._limits = limits
        self._id = session_id  # the handshake's, else the first message's
        self._clientseq = 0  # the last client seq taken
        self._serverseq = 0  # the last server seq sent
        self._media: Media | None = None  # chosen by `open`
        self._configure: Configure | None = None  # the stream's settings as last sent
        self._language: str | None = None  # the client's tag (`open`, `update`)
        self._replies: deque[_Reply] = deque()
        self._timeline = Timeline(MAX_FILL_S * RATE)
        self._paused = False
        self._opened = False  # `opened` sent: the client has a session to continue elsewhere
        self._closing = False  # `close` taken: `closed` answers the end
        self._disconnected = False
        self._handed_off = False  # `reconnect` sent
        self._continues: tuple[ContinuedSession, ...] = ()  # the `open`'s continuedSessions

    @property
    def max_message_bytes(self) -> int:
        # A hard cap for the library; the limits below answer with a `disconnect` first.
        return 4 * max(self._limits.max_frame_bytes, MAX_TEXT_BYTES)

    @property
    def end_grace_s(self) -> float:
        return CLIENT_CLOSE_GRACE_S

    @property
    def continues(self) -> tuple[ContinuedSession, ...]:
        """The earlier sessions this one continues, as its `open` named them (or none)."""
        return self._continues

    @property
    def serverseq(self) -> int:
        """The seq of the last server message encoded (0 before the first)."""
        return self._serverseq

    @property
    def clientseq(self) -> int:
        """The seq of the last client message taken (0 before the first)."""
        return self._clientseq

    def opening(self) -> Sequence[Command]:
        return ()

    def is_fatal(self, error: ProtocolError) -> bool:
        return True  # AudioHook's answer to any error is a disconnect

    def close_code(self, error: ProtocolError) -> int:
        return error.close_code

    # ---- client messages ----------------------------------------------------------

    def decode(self, message: Frame) -> Sequence[Command]:
        if isinstance(message, bytes):
            return self._audio(message)
        msg = read_client_message(message)
        self._check_order(msg)
        if msg.type not in CLIENT_TYPES:
            supported = ", ".join(CLIENT_TYPES)
            raise UnknownMessageTypeError(
                f"{msg.type!r} is not an AudioHook client message ({supported})"
            )
        if msg.type == "close":
            return self._close(msg)
        if self._closing or msg.type in NOTE_TYPES:
            return self._note(msg)  # nothing more changes once the stream is closing
        if msg.type == "open":
            return self._open(msg)
        if self._media is None:
            raise StateError(f"{msg.type!r} before open: the session is not open")
        return self._opened_message(msg)

    def _check_order(self, msg: ClientMessage) -> None:
        """Seq counts up by one; serverseq and the session id agree with the server's."""
        if msg.seq != self._clientseq + 1:
            raise StateError(
                f"seq {msg.seq} is out of sequence: the next client message is "
                f"seq {self._clientseq + 1}"
            )
        self._clientseq = msg.seq
        if msg.serverseq > self._serverseq:
            raise InvalidFieldError(
                f"serverseq {msg.serverseq} is ahead of the server's last seq {self._serverseq}"
            )
        if self._id is None:
            self._id = msg.id
        elif msg.id != self._id:
            raise InvalidFieldError(f"id {msg.id} is not this session's ({self._id})")

    def _opened_message(self, msg: ClientMessage) -> Sequence[Command]:
        """A message of an open session (not `open`, `close`, nor one of NOTE_TYPES)."""
        match msg.type:
            case "ping":
                return (Mark(str(msg.seq)),)  # its Marked is the pong
            case "paused":
                if self._paused:
                    return ()  # Genesys' client repeats it: the first one paused
                self._paused = True
                return (Cut(),)
            case "resumed":
                return self._resumed(msg)
            case "discarded":
                start = duration_field(msg.parameters, "start", "discarded: ")
                dropped = duration_field(msg.parameters, "discarded", "discarded: ")
                # Skipped, not filled: the client may go on sending the audio it reports.
                self._timeline.close_gap(start + dropped, fill_ok=False)
                return ()
            case "update":
                return self._update(msg)
        raise UnknownMessageTypeError(f"{msg.type!r} is not an AudioHook client message")

    def _open(self, msg: ClientMessage) -> Sequence[Command]:
        if self._media is not None:
            raise StateError("open after open: the session is already open")
        request = read_open(msg.parameters)
        media = choose_media(request.media)
        if media is None:
            offered = [m.to_json() for m in request.media]
            raise InvalidFieldError(
                f"none of the offered media is supported ({offered}): this server takes "
                f"PCMU at {RATE} Hz, one or two channels"
            )
        self._continue(request.continued, msg.position)
        self._media, self._language = media, request.language
        stereo = len(media.channels) == 2
        self._configure = Configure(
            AudioFormat("mulaw", RATE, len(media.channels)),
            StreamOptions(language=stream_language(request.language), redact=request.redact),
            media.channels if stereo else (),
            self._stream_id(request.conversation_id),
        )
        parameters: dict[str, Any] = {"startPaused": False, "media": [media.to_json()]}
        if request.wants_languages:
            parameters["supportedLanguages"] = list(SUPPORTED_LANGUAGES)
        return self._reply("opened", msg, parameters)

    def _stream_id(self, conversation_id: str) -> str | None:
        """The conversation names the stream (a probe's null id names none). A continued
        session is opened while the session it continues still holds that name (the
        client closes it after): it is named by its own session id instead."""
        if conversation_id == NULL_UUID:
            return None
        return self._id if self._continues and self._id else conversation_id

    def _continue(self, continued: tuple[ContinuedSession, ...], position: int) -> None:
        """Take the sessions an `open` continues; its audio starts at its `position`."""
        for index, earlier in enumerate(continued):
            if earlier.id == self._id:
                raise InvalidFieldError(
                    f"open: continuedSessions[{index}].id is this session's own ({self._id})"
                )
        self._continues = continued
        if continued:
            # The client may count a continued session's positions on from the earlier
            # one's or from zero: offsets and the positions of `resumed` and `discarded`
            # are in its count either way. Not filled: no audio precedes it here.
            self._timeline.close_gap(position, fill_ok=False)

    def _reply(
        self, kind: str | None, msg: ClientMessage, parameters: Mapping[str, Any]
    ) -> Sequence[Command]:
        """A Configure of the current settings, whose Configured is sent as `kind`."""
        configure = self._configure
        if configure is None:  # only `open` makes the first: a bug if it is missing
            raise StateError(f"{msg.type!r} before open: the session is not open")
        self._replies.append(_Reply(kind, msg.seq, parameters))
        return (configure,)

    def _resumed(self, msg: ClientMessage) -> Sequence[Command]:
        start = duration_field(msg.parameters, "start", "resumed: ")
        dropped = duration_field(msg.parameters, "discarded", "resumed: ")
        if not self._paused:
            return ()  # as the reference server: a resume of nothing changes nothing
        self._paused = False
        return self._fill(start + dropped)

    def _fill(self, target: int) -> Sequence[Command]:
        """Silence up to AudioHook position `target`, in one-second commands."""
        channels = len(self._media.channels) if self._media else 1
        samples = self._timeline.close_gap(target)
        second = RATE * channels
        data = SILENCE * (samples * channels)
        return tuple(Audio(data[i : i + second]) for i in range(0, len(data), second))

    def _update(self, msg: ClientMessage) -> Sequence[Command]:
        """The utterances in progress end here; a new language applies to the next ones."""
        cut: tuple[Command, ...] = (Cut(),)
        if msg.parameters.get("language") is None:
            return cut  # the field is optional: an update of nothing this server keeps
        tag = language_field(msg.parameters.get("language"), "update: ")
        self._language = tag
        configure = self._configure
        language = stream_language(tag)
        if configure is None or configure.options.language == language:
            return cut
        self._configure = replace(configure, options=replace(configure.options, language=language))
        return (*cut, *self._reply(None, msg, {}))

    def _close(self, msg: ClientMessage) -> Sequence[Command]:
        reason = msg.parameters.get("reason")
        if reason not in CLOSE_REASONS:
            raise InvalidFieldError(f"close: reason must be one of {', '.join(CLOSE_REASONS)}")
        if self._closing:
            return ()  # a repeated close: the first one's `closed` answers both
        self._closing, self._paused = True, False
        return (Stop(),)

    def _note(self, msg: ClientMessage) -> Sequence[Command]:
        """Messages that change nothing, checked: NOTE_TYPES (a `playback_*` has no
        parameters to check), and any message but `close` once closing (the stream takes
        no more commands then)."""
        if msg.type == "error":
            count_field(msg.parameters, "code")
            if not isinstance(msg.parameters.get("message"), str):
                raise InvalidFieldError("error: message must be a string")
        elif msg.type == "dtmf" and not isinstance(msg.parameters.get("digit"), str):
            raise InvalidFieldError("dtmf: digit must be a string")
        return ()

    def _audio(self, data: bytes) -> Sequence[Command]:
        self._limits.check_frame(len(data), binary=True)
        media = self._media
        if media is None:
            raise StateError("audio before open: send open and wait for opened first")
        if self._closing:
            raise StateError("audio after close")
        if self._paused:
            raise StateError("audio while paused: send resumed first")
        channels = len(media.channels)
        if len(data) % channels:
            raise InvalidAudioError(
                f"an audio frame of {len(data)} bytes is not whole {channels}-channel samples"
            )
        if not data:
            return ()
        self._timeline.advance(len(data) // channels)
        return (Audio(data),)

    # ---- server messages ----------------------------------------------------------

    def encode(self, event: SessionEvent) -> Sequence[Frame]:
        match event:
            case Configured():
                reply = self._replies.popleft() if self._replies else None
                if reply is None or reply.kind is None:
                    return ()
                self._opened = self._opened or reply.kind == "opened"
                return (self._message(reply.kind, reply.parameters, reply.clientseq),)
            case Marked():
                return (self._message("pong", {}, int(event.token)),)
            case FinalEvent():
                return self._transcript(event)
            case ErrorEvent():
                reason = "unauthorized" if event.code == "unauthorized" else "error"
                return self._disconnect(reason, event.message)
            case Ended():
                return self._end()
            case HandOff():
                return self.hand_off(event.info)
        return ()  # partials, speech events, failed utterances: nothing in AudioHook

    def _message(
        self, kind: str, parameters: Mapping[str, Any], clientseq: int | None = None
    ) -> str:
        """The next server message, counted."""
        frame = self._next(kind, parameters, clientseq)
        self._serverseq += 1
        return frame

    def _next(self, kind: str, parameters: Mapping[str, Any], clientseq: int | None = None) -> str:
        """The next server message, not yet counted."""
        answered = self._clientseq if clientseq is None else clientseq
        session_id = self._id or NULL_UUID
        return server_message(kind, session_id, self._serverseq + 1, answered, parameters)

    @property
    def can_hand_off(self) -> bool:
        """Whether there is a session to hand off now (see `hand_off`)."""
        return self._opened and not (self._closing or self._disconnected or self._handed_off)

    def hand_off(self, info: str = HAND_OFF_INFO) -> Sequence[Frame]:
        """Ask the client to continue this session on a new connection: the `reconnect`
        message to send now, or none where there is nothing to hand off.

        The stream goes on: the client, having opened the new session (whose `open` names
        this one in `continuedSessions`), closes this one, and `closed` answers after the
        owed finals. If the stream ends first, the client did not move (Genesys Cloud does
        not yet): its end is the `disconnect` a drain sends (see `_end`). There
        is nothing to hand off before `opened` has gone out, once the client has sent
        `close` or the server a `disconnect`, nor a second time.
        """
        if not self.can_hand_off:
            return ()
        self._handed_off = True
        return (self._message("reconnect", {"info": _cut(info)}),)

    def _end(self) -> Sequence[Frame]:
        """The stream's end: `closed` answers a `close`; else the server is shutting down
        (a client asked to reconnect that has not closed this session by now did not
        move, and is told it is over). Nothing after a `disconnect`: the session is over
        for the client already.
        """
        if self._disconnected:
            return ()
        if self._closing:
            return (self._message("closed", {}),)
        return self._disconnect("completed", "the server is shutting down")

    def _disconnect(self, reason: str, info: str) -> Sequence[Frame]:
        """The one `disconnect` of a session (`completed`, `unauthorized` or `error`)."""
        if self._disconnected:
            return ()
        self._disconnected = True
        return (self._message("disconnect", {"reason": reason, "info": _cut(info)}),)

    def _transcript(self, final: FinalEvent) -> Sequence[Frame]:
        if not final.transcript.text.strip():
            return ()
        entity_id = transcript_id(self._id or NULL_UUID, final.channel or 0, final.utt_id)
        language = language_tag(final.transcript.lang, self._language)
        # An utterance sits on AudioHook's timeline from where it began, its audio
        # contiguous: a discard reported mid-speech moves the utterances after it, and the
        # one in progress keeps the length of the audio heard (as Genesys' reference
        # server and its suite count it; the client may have sent that audio after all).
        origin = self._timeline.position_ms(final.start_ms) - final.start_ms

        def position(stream_ms: int) -> int:
            return origin + stream_ms

        entity = transcript_entity(final, entity_id, position, language)
        if len(self._next("event", {"entities": [entity]}).encode()) > MAX_TEXT_BYTES:
            # Over the client's cap with its words (a long utterance): the text alone.
            entity = transcript_entity(final, entity_id, position, language, with_words=False)
        return (self._message("event", {"entities": [entity]}),)


def _cut(info: str) -> str:
    """An `info` of at most MAX_INFO_CHARS: an error may quote a long client value."""
    return info if len(info) <= MAX_INFO_CHARS else info[: MAX_INFO_CHARS - 1] + "…"


def make_audiohook_codec(handshake: Handshake, settings: CodecSettings) -> Codec:
    """The codec for one AudioHook connection, named by its `Audiohook-Session-Id`; with a
    client secret, a handshake Genesys did not sign is refused (SignatureError)."""
    if settings.audiohook_client_secret is not None:
        check_handshake(handshake, settings.audiohook_client_secret)
    header = handshake.headers.get("audiohook-session-id")
    session_id = None
    if header is not None:
        session_id = uuid_field({"Audiohook-Session-Id": header}, "Audiohook-Session-Id")
    return AudioHookCodec(settings.limits, session_id)
