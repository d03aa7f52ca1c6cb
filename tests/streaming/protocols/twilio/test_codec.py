"""Twilio Media Streams codec: every message and error path, timestamp placement, signatures."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.types import Transcript
from streaming.audio.decoder import AudioFormat, ulaw_to_linear
from streaming.commands import Audio, Command, Configure, Stop, StreamOptions
from streaming.core import SessionCore
from streaming.errors import (
    CLOSE_MESSAGE_TOO_BIG,
    CLOSE_POLICY_VIOLATION,
    FrameTooLargeError,
    InvalidAudioError,
    InvalidFieldError,
    MalformedMessageError,
    ProtocolError,
    SessionLimitError,
    StateError,
    UnauthorizedError,
    UnknownMessageTypeError,
)
from streaming.events import Configured, Ended, ErrorEvent, Final, SessionEvent
from streaming.limits import SessionLimits
from streaming.protocols.base import CodecSettings, Handshake
from streaming.protocols.caps import MAX_REDACT_ITEMS
from streaming.protocols.twilio.codec import MAX_MESSAGE_BYTES, TwilioCodec, make_twilio_codec
from streaming.protocols.twilio.jitter import (
    MULAW_SILENCE,
    JitterConfig,
    JitterStats,
    Placed,
    Timeline,
)
from streaming.protocols.twilio.signature import (
    signature_valid,
    twilio_signature,
    url_variants,
)
from streaming.redaction.policies import Policy, Redaction
from streaming.segmenter import SegmenterConfig
from streaming.session import SessionConfig
from tests.callcentre.twilio_emulator import (
    TwilioCall,
    media_messages,
    start_message,
    stop_message,
)
from tests.streaming.fakes import EnergyVadModel, answer, tone_bursts
from tools.g711 import encode_mulaw

CALL = "CA" + "0123456789abcdef" * 2
KEY = "sekret"
FRAME = 160  # 20 ms of 8 kHz μ-law
SILENCE = bytes([MULAW_SILENCE])


# ---- messages as Twilio sends them ------------------------------------------------


def connected() -> str:
    return json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"})


def start(
    tracks: Sequence[str] | None = ("inbound", "outbound"),
    params: dict[str, str] | None = None,
    **fields: Any,
) -> str:
    body: dict[str, Any] = {
        "accountSid": "AC" + "0" * 32,
        "streamSid": "MZ" + "1" * 32,
        "callSid": CALL,
        "customParameters": {"api_key": KEY} if params is None else params,
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
    }
    if tracks is not None:
        body["tracks"] = list(tracks)
    body.update(fields)
    return json.dumps({"event": "start", "sequenceNumber": "1", "start": body})


def media(data: bytes, timestamp: Any = 0, track: str | None = "inbound", **extra: Any) -> str:
    body: dict[str, Any] = {"chunk": "1", "payload": base64.b64encode(data).decode(), **extra}
    if timestamp is not None:
        body["timestamp"] = timestamp if isinstance(timestamp, str) else str(timestamp)
    if track is not None:
        body["track"] = track
    return json.dumps({"event": "media", "sequenceNumber": "2", "media": body})


def stop() -> str:
    return json.dumps({"event": "stop", "stop": {"accountSid": "AC0", "callSid": CALL}})


def dtmf(digit: str = "5") -> str:
    return json.dumps({"event": "dtmf", "dtmf": {"track": "inbound_track", "digit": digit}})


def mark(name: str = "m1") -> str:
    return json.dumps({"event": "mark", "mark": {"name": name}})


def keyed(key: str | None) -> bool:
    return key == KEY


def codec(keys: bool = True, jitter: JitterConfig | None = None) -> TwilioCodec:
    settings = CodecSettings(SessionLimits(), keyed if keys else CodecSettings().check_key)
    return TwilioCodec(settings, jitter)


def started(tracks: Sequence[str] = ("inbound", "outbound"), **kw: Any) -> TwilioCodec:
    c = codec(**kw)
    c.decode(connected())
    c.decode(start(tracks))
    return c


def frames(n: int, seed: int = 0) -> bytes:
    """n frames of random non-silent bytes, so misplaced audio shows."""
    rng = random.Random(seed)  # one generator: a new one per byte would repeat one byte
    return bytes(rng.randrange(0, 0x7F) for _ in range(n * FRAME))


def audio_of(commands: Sequence[Command], channel: int | None = None) -> bytes:
    return b"".join(c.data for c in commands if isinstance(c, Audio) and c.channel == channel)


def fails(c: TwilioCodec, message: str | bytes, kind: type[ProtocolError]) -> ProtocolError:
    with pytest.raises(kind) as info:
        c.decode(message)
    return info.value


# ---- connected and start ----------------------------------------------------------


def test_connected_says_nothing_and_the_codec_waits_for_start() -> None:
    c = codec()
    assert c.opening() == ()
    assert c.decode(connected()) == ()
    assert c.max_message_bytes == MAX_MESSAGE_BYTES and c.end_grace_s == 0.0


def test_start_with_both_tracks_is_a_two_channel_stream_named_by_the_call() -> None:
    c = codec()
    (command,) = c.decode(start(["outbound", "inbound"]))
    assert command == Configure(
        AudioFormat("mulaw", 8000, 2), StreamOptions(), ("inbound", "outbound"), CALL
    )
    assert c.call is not None and c.call.stream_sid == "MZ" + "1" * 32


@pytest.mark.parametrize("tracks", [["inbound"], ["inbound_track"], None, ["outbound"]])
def test_one_track_is_a_mono_stream(tracks: list[str] | None) -> None:
    (command,) = codec().decode(start(tracks))
    assert command == Configure(AudioFormat("mulaw", 8000, 1), StreamOptions(), (), CALL)


def test_custom_parameters_set_options_and_others_are_ignored() -> None:
    params = {"api_key": KEY, "language": "en", "pace": "replay", "itn": "false"}
    params |= {"partials": "0", "emotion": "TRUE", "callReference": "ticket-42"}
    (command,) = codec().decode(start(params=params))
    assert isinstance(command, Configure)
    assert command.options == StreamOptions(language="en", itn=False, partials=False, pace="replay")


def test_redact_parameters_add_policies_to_the_stream() -> None:
    params = {"api_key": KEY, "redact": "pci,email", "redact_mask": "true"}
    (command,) = codec().decode(start(params=params))
    assert isinstance(command, Configure)
    assert command.options.redact == Redaction(frozenset({Policy.PCI, Policy.EMAIL}), mask=True)


def test_a_webhook_parameter_names_the_streams_webhook() -> None:
    params = {"api_key": KEY, "webhook_url": "https://hooks.example.com/calls/"}
    (command,) = codec().decode(start(params=params))
    assert isinstance(command, Configure)
    assert command.webhook_url == "https://hooks.example.com/calls/"
    # Whether the server sends there is the server's call; a non-URL is refused here.
    bad = {"api_key": KEY, "webhook_url": "file:///etc/passwd"}
    assert codec().is_fatal(fails(codec(), start(params=bad), InvalidFieldError))


@pytest.mark.parametrize(
    "params",
    [
        {"language": "klingon"},
        {"pace": "fast"},
        {"itn": "maybe"},
        {"timestamps": ""},
        {"redact": "pci,cards"},
        {"redact": "pci," * MAX_REDACT_ITEMS + "pci"},  # longer than any list needs
        {"redact_mask": "maybe"},
    ],
)
def test_bad_option_parameters_end_the_stream(params: dict[str, str]) -> None:
    c = codec()
    error = fails(c, start(params={"api_key": KEY, **params}), InvalidFieldError)
    assert c.is_fatal(error)


def test_a_wrong_or_missing_key_is_refused_at_start_before_any_audio() -> None:
    for params in ({"api_key": "nope"}, {}, {"token": KEY}):
        c = codec()
        error = fails(c, start(params=params), UnauthorizedError)
        assert c.is_fatal(error) and c.close_code(error) == CLOSE_POLICY_VIOLATION
        # The stream never started: its audio is not even decoded.
        assert c.is_fatal(fails(c, media(frames(1)), StateError))


def test_the_key_is_judged_before_the_rest_of_start() -> None:
    bad_format = {"encoding": "audio/opus", "sampleRate": 48000}
    fails(codec(), start(params={"api_key": "x"}, mediaFormat=bad_format), UnauthorizedError)
    fails(codec(), start(params={"api_key": KEY}, mediaFormat=bad_format), InvalidFieldError)


def test_without_server_keys_any_start_is_accepted() -> None:
    (command,) = codec(keys=False).decode(start(params={}))
    assert isinstance(command, Configure)


@pytest.mark.parametrize(
    "fields",
    [
        {"mediaFormat": {"encoding": "audio/l16", "sampleRate": 8000, "channels": 1}},
        {"mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 16000, "channels": 1}},
        {"mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 2}},
        {"mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": True}},
        {"mediaFormat": "mulaw"},
        {"callSid": None},
        {"callSid": "CA/../x"},
        {"tracks": []},
        {"tracks": ["inbound", "sideways"]},
        {"tracks": "inbound"},
        {"customParameters": {"api_key": KEY, "n": 5}},
    ],
)
def test_a_bad_start_ends_the_stream(fields: dict[str, Any]) -> None:
    c = codec(keys=False)
    assert c.is_fatal(fails(c, start(**fields), InvalidFieldError))


def test_a_start_without_its_object_ends_the_stream() -> None:
    c = codec()
    assert c.is_fatal(fails(c, json.dumps({"event": "start"}), InvalidFieldError))


def test_the_media_format_may_be_written_as_strings_or_left_out() -> None:
    fmt = {"encoding": "AUDIO/X-MULAW", "sampleRate": "8000", "channels": "1"}
    assert codec().decode(start(mediaFormat=fmt))
    body = json.loads(start())
    del body["start"]["mediaFormat"]
    assert codec().decode(json.dumps(body))


def test_a_second_start_is_dropped_and_the_stream_goes_on() -> None:
    c = started()
    assert not c.is_fatal(fails(c, start(), StateError))
    assert audio_of(c.decode(media(frames(1))), 0) == frames(1)
    assert c.rejected == 1


# ---- messages before start ----------------------------------------------------------


def test_a_second_connected_before_start_ends_the_stream() -> None:
    # Unkeyed until `start`: each message would keep the socket open another idle timeout.
    c = codec()
    assert c.decode(connected()) == ()
    assert c.is_fatal(fails(c, connected(), StateError))
    assert c.rejected == 0


@pytest.mark.parametrize("message", [media(b"\xff" * FRAME), stop(), dtmf(), mark()])
def test_anything_but_connected_before_start_ends_the_stream(message: str) -> None:
    c = codec()
    c.decode(connected())
    assert c.is_fatal(fails(c, message, StateError))
    assert c.rejected == 0


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("{not json", MalformedMessageError),
        ("[1, 2]", MalformedMessageError),
        (b"\x00\x01binary", MalformedMessageError),
        (json.dumps({"event": "hangup"}), UnknownMessageTypeError),
        (json.dumps({"type": "start"}), UnknownMessageTypeError),
        (json.dumps({"event": 7}), UnknownMessageTypeError),
    ],
)
def test_bad_messages_before_start_end_the_stream(
    message: str | bytes, kind: type[ProtocolError]
) -> None:
    c = codec()
    assert c.is_fatal(fails(c, message, kind))


# ---- media ----------------------------------------------------------------------------


def test_media_goes_to_its_tracks_channel_at_once() -> None:
    c = started()
    a, b = frames(1, 1), frames(1, 2)
    assert c.decode(media(a, 0, "inbound")) == [Audio(a, channel=0)]
    assert c.decode(media(b, 0, "outbound")) == [Audio(b, channel=1)]
    assert c.decode(media(a, 20, "inbound_track")) == [Audio(a, channel=0)]


def test_a_mono_streams_audio_has_no_channel() -> None:
    c = started(["inbound"])
    data = frames(2)
    assert c.decode(media(data[:FRAME], 0)) == [Audio(data[:FRAME])]
    assert c.decode(media(data[FRAME:], 20, track=None)) == [Audio(data[FRAME:])]


def test_a_mono_outbound_stream_takes_its_one_track() -> None:
    c = started(["outbound"])
    assert c.decode(media(frames(1), 0, "outbound")) == [Audio(frames(1))]
    assert not c.is_fatal(fails(c, media(frames(1), 20, "inbound"), InvalidFieldError))


@pytest.mark.parametrize(
    "message",
    [
        media(frames(1), "-20"),
        media(frames(1), "soon"),
        media(frames(1), "1e3"),
        json.dumps({"event": "media", "media": {"track": "inbound", "timestamp": True}}),
        json.dumps({"event": "media", "media": {"track": "inbound", "payload": 5}}),
        json.dumps({"event": "media", "media": "AAAA"}),
        json.dumps({"event": "media"}),
        media(frames(1), 0, "sideways"),
        media(frames(1), 0, track=None),  # two tracks: which one?
    ],
)
def test_a_bad_media_field_drops_that_chunk_only(message: str) -> None:
    c = started()
    assert not c.is_fatal(fails(c, message, InvalidFieldError))
    assert c.rejected == 1
    assert audio_of(c.decode(media(frames(1), 0)), 0) == frames(1)


@pytest.mark.parametrize("payload", ["not base64!", "AAA", "AAAA\n", "ÄÄÄÄ"])
def test_bad_base64_drops_that_chunk_and_its_hole_becomes_silence(payload: str) -> None:
    c = started(["inbound"])
    body = {"track": "inbound", "timestamp": "20", "payload": payload}
    first = c.decode(media(frames(1), 0))
    error = fails(c, json.dumps({"event": "media", "media": body}), InvalidAudioError)
    assert not c.is_fatal(error) and c.rejected == 1
    later = [*c.decode(media(frames(1, 3), 40)), *c.decode(stop())]
    assert audio_of([*first, *later]) == frames(1) + SILENCE * FRAME + frames(1, 3)


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("{not json", MalformedMessageError),
        (b"\x00binary", MalformedMessageError),
        (json.dumps({"event": "clear"}), UnknownMessageTypeError),
        (json.dumps({"streamSid": "MZ1"}), UnknownMessageTypeError),
    ],
)
def test_a_bad_message_after_start_is_dropped_and_counted(
    message: str | bytes, kind: type[ProtocolError]
) -> None:
    c = started()
    assert not c.is_fatal(fails(c, message, kind))
    assert c.rejected == 1


def test_errors_the_session_raises_still_end_the_stream() -> None:
    c = started()
    c.decode(media(frames(1)))
    assert c.is_fatal(SessionLimitError("session exceeded its 14400 s limit"))
    # An error let pass is forgiven once: the same kind from the session is not.
    error = fails(c, "{", MalformedMessageError)
    assert not c.is_fatal(error) and c.is_fatal(error)


def test_dtmf_and_marks_are_counted_and_say_nothing() -> None:
    c = started()
    assert c.decode(dtmf("1")) == () and c.decode(dtmf("#")) == () and c.decode(mark()) == ()
    assert (c.dtmf, c.marks, c.rejected) == (2, 1, 0)


def test_connected_after_start_is_dropped_and_counted() -> None:
    c = started()
    assert not c.is_fatal(fails(c, connected(), StateError))
    assert c.rejected == 1
    assert audio_of(c.decode(media(frames(1))), 0) == frames(1)


def test_a_start_without_connected_is_taken_and_connected_may_not_follow() -> None:
    c = codec()
    assert c.decode(start())
    assert not c.is_fatal(fails(c, connected(), StateError))


# ---- message size -----------------------------------------------------------------------


def padded_media(size: int) -> str:
    """A valid media message of exactly `size` bytes of UTF-8, padded with two-byte characters."""
    body = {"track": "inbound", "timestamp": "0", "payload": base64.b64encode(frames(1)).decode()}

    def dump(pad: str) -> str:
        message = {"event": "media", "media": {**body, "pad": pad}}
        return json.dumps(message, ensure_ascii=False)

    room = size - len(dump("").encode())
    message = dump("é" * (room // 2) + "x" * (room % 2))
    assert len(message.encode()) == size
    return message


def test_a_message_at_the_size_cap_is_taken() -> None:
    c = started()
    assert audio_of(c.decode(padded_media(MAX_MESSAGE_BYTES)), 0) == frames(1)


@pytest.mark.parametrize("phase", ["before start", "after start"])
def test_a_message_over_the_size_cap_ends_the_stream(phase: str) -> None:
    c = codec() if phase == "before start" else started()
    # Counted in UTF-8 bytes: fewer characters than the cap, more bytes.
    text = padded_media(MAX_MESSAGE_BYTES + 1)
    assert len(text) <= MAX_MESSAGE_BYTES
    for message in (text, "x" * (MAX_MESSAGE_BYTES + 1), b"\0" * (MAX_MESSAGE_BYTES + 1)):
        error = fails(c, message, FrameTooLargeError)
        assert c.is_fatal(error) and c.close_code(error) == CLOSE_MESSAGE_TOO_BIG
    assert c.rejected == 0


# ---- stop -----------------------------------------------------------------------------


def test_stop_flushes_held_audio_then_stops() -> None:
    c = started()
    a, b = frames(1, 1), frames(1, 2)
    assert c.decode(media(a, 0, "inbound")) == [Audio(a, channel=0)]
    assert c.decode(media(b, 40, "inbound")) == []  # held: the frame at 20 ms may come
    out = c.decode(stop())
    assert out == [
        Audio(SILENCE * FRAME + b, channel=0),
        Audio(SILENCE * 3 * FRAME, channel=1),
        Stop(),
    ]


def test_after_stop_media_is_dropped_and_a_repeated_stop_is_harmless() -> None:
    c = started()
    assert c.decode(stop()) == [Stop()]
    assert not c.is_fatal(fails(c, media(frames(1)), StateError))
    assert c.decode(stop()) == []


def test_encode_sends_twilio_nothing() -> None:
    c = started()
    transcript = Transcript("hi", "en", "neutral", "speech", True, "hi", ())
    events: list[SessionEvent] = [
        Configured("s", AudioFormat("mulaw", 8000, 2), StreamOptions(), "m", True),
        Final(0, 0, 100, transcript, decided_ms=100, channel=1),
        ErrorEvent("invalid_audio", "bad"),
        Ended(),
    ]
    assert all(c.encode(e) == () for e in events)


# ---- placement by timestamp -----------------------------------------------------------


def play(timeline: Timeline, chunks: Sequence[tuple[int, int, bytes]]) -> dict[int, bytes]:
    """Each track's audio after pushing (track, ms, data) chunks in order, then flushing."""
    out: dict[int, bytes] = {}
    placed: list[Placed] = []
    for track, ms, data in chunks:
        placed += timeline.push(track, ms, data)
    placed += timeline.flush()
    for p in placed:
        out[p.track] = out.get(p.track, b"") + p.data
    return out


def test_a_gap_becomes_silence_of_its_length() -> None:
    t = Timeline(1)
    a, b = frames(1, 1), frames(1, 2)
    assert play(t, [(0, 0, a), (0, 100, b)]) == {0: a + SILENCE * 4 * FRAME + b}
    assert t.stats.silence_samples == 4 * FRAME


def test_audio_starts_on_the_streams_clock() -> None:
    # Twilio's first chunk is often stamped a few ms in: those ms are silence.
    assert play(Timeline(1), [(0, 5, frames(1))]) == {0: SILENCE * 40 + frames(1)}


def test_shuffled_frames_come_out_in_order() -> None:
    data = frames(50)
    chunks = [(0, 20 * i, data[i * FRAME : (i + 1) * FRAME]) for i in range(50)]
    rng = random.Random(7)
    shuffled = sorted(chunks, key=lambda c: c[1] / 20 + rng.uniform(0, 4))
    assert shuffled != chunks
    t = Timeline(1)
    assert play(t, shuffled) == {0: data}
    assert t.stats.silence_samples == 0 and t.stats.late == 0


def test_in_order_audio_is_never_held_and_a_hole_is_held_for_its_chunk() -> None:
    t = Timeline(1)
    data = frames(4)
    piece = [data[i * FRAME : (i + 1) * FRAME] for i in range(4)]
    assert t.push(0, 0, piece[0]) == [Placed(0, piece[0])]
    assert t.push(0, 40, piece[2]) == []
    assert t.push(0, 60, piece[3]) == []
    assert t.push(0, 20, piece[1]) == [Placed(0, piece[1] + piece[2] + piece[3])]


def test_a_lost_chunk_becomes_silence_once_the_stream_is_past_it_by_the_hold() -> None:
    t = Timeline(1, JitterConfig(hold_ms=100))
    data = frames(10)
    out = b""
    for i in range(1, 10):  # the frame at 0 ms never comes
        out += b"".join(p.data for p in t.push(0, 20 * i, data[i * FRAME : (i + 1) * FRAME]))
        if i < 5:
            assert out == b""  # not yet 100 ms past the hole
    assert out == SILENCE * FRAME + data[FRAME:]
    # The lost chunk, arriving at last, is late: its place has been played out.
    assert t.push(0, 0, data[:FRAME]) == [] and t.stats.late == 1


def test_duplicates_are_dropped_and_counted() -> None:
    t = Timeline(1)
    a = frames(2)
    assert t.push(0, 0, a[:FRAME]) == [Placed(0, a[:FRAME])]
    assert t.push(0, 0, a[:FRAME]) == []  # already played
    assert t.push(0, 40, a[FRAME:]) == []
    assert t.push(0, 40, a[FRAME:]) == []  # already held
    assert (t.stats.duplicates, t.stats.late) == (2, 0)


def test_an_overlapping_chunk_loses_only_its_overlap() -> None:
    t = Timeline(1)
    a, b = frames(1, 1), frames(1, 2)
    assert play(t, [(0, 0, a), (0, 10, b)]) == {0: a + b[80:]}


def test_a_silent_track_is_filled_as_the_call_goes_on() -> None:
    # Only the caller's track sends: the other channel still follows the call's clock,
    # at most the lag (3 s) behind.
    t = Timeline(2)
    data = frames(200)
    out: dict[int, int] = {0: 0, 1: 0}
    for i in range(200):
        for p in t.push(0, 20 * i, data[i * FRAME : (i + 1) * FRAME]):
            out[p.track] += len(p.data)
        assert out[0] == (i + 1) * FRAME
        assert out[1] == max(0, (i + 1) * FRAME - 24_000)  # 3 s behind, never ahead
    for p in t.flush():
        out[p.track] += len(p.data)
    assert out == {0: 200 * FRAME, 1: 200 * FRAME}


def test_a_track_that_starts_late_starts_at_its_place_on_the_clock() -> None:
    a, b = frames(10, 1), frames(1, 2)
    chunks = [(0, 20 * i, a[i * FRAME : (i + 1) * FRAME]) for i in range(10)] + [(1, 100, b)]
    got = play(Timeline(2), chunks)
    assert got == {0: a, 1: SILENCE * 5 * FRAME + b + SILENCE * 4 * FRAME}


def call_chunks(
    sources: Sequence[bytes],
    skew: Sequence[int] = (0, 0),
    lost: Sequence[Collection[int]] = ((), ()),
) -> list[tuple[int, int, bytes]]:
    """Both tracks' 20 ms chunks (track, ms, data) in the order they arrive: track t's
    frame i comes with the other track's frame i + skew[t] (a track running behind)."""
    arrivals = [
        (i + skew[track], track, 20 * i, source[i * FRAME : (i + 1) * FRAME])
        for track, source in enumerate(sources)
        for i in range(len(source) // FRAME)
        if i not in lost[track]
    ]
    return [(track, ms, data) for _, track, ms, data in sorted(arrivals, key=lambda a: a[:2])]


def restamped(
    chunks: list[tuple[int, int, bytes]], at: int, stamp: int
) -> list[tuple[int, int, bytes]]:
    """The chunks with the one at index `at` stamped `stamp` ms instead."""
    track, _, data = chunks[at]
    return [*chunks[:at], (track, stamp, data), *chunks[at + 1 :]]


def test_one_far_future_timestamp_costs_nothing_else() -> None:
    # The chunk's own timestamp is wrong; it is placed after its track's audio, where it
    # belongs, and every later chunk of both tracks keeps its place.
    sources = [frames(250, 1), frames(250, 2)]
    for stamp in (10**11, 3_000):  # far off, or only a couple of seconds ahead
        t = Timeline(2)
        assert play(t, restamped(call_chunks(sources), 101, stamp)) == dict(enumerate(sources))
        assert t.stats == JitterStats(misplaced=1)


def test_an_extra_far_future_chunk_takes_one_slot_at_most() -> None:
    sources = [frames(250, 1), frames(250, 2)]
    chunks = call_chunks(sources)
    bogus = frames(1, 9)
    t = Timeline(2)
    got = play(t, [*chunks[:100], (0, 10**11, bogus), *chunks[100:]])
    assert got[1] == sources[1]
    # The slot after the inbound track's audio took the bogus chunk; its own was a duplicate.
    assert got[0] == sources[0][: 50 * FRAME] + bogus + sources[0][51 * FRAME :]
    assert t.stats == JitterStats(duplicates=1, misplaced=1)


@pytest.mark.parametrize("track", [0, 1])
def test_a_chunk_stamped_a_little_ahead_opens_no_hole(track: int) -> None:
    # Within a second of the newest audio its timestamp is taken, but alone it is no reason
    # to give up the audio before it: the track's own chunks keep coming in order. Track 1
    # runs 300 ms behind, so its bad chunk is 1.2 s ahead of its own audio.
    sources = [frames(100, 1), frames(100, 2)]
    chunks = call_chunks(sources, skew=(0, 15))
    at = chunks.index((track, 400, sources[track][20 * FRAME : 21 * FRAME]))
    chunks = restamped(chunks, at, 400 + 300 * track + 900)
    t = Timeline(2)
    got = play(t, chunks)
    assert got[1 - track] == sources[1 - track]
    moved_to = (1300 + 300 * track) // 20
    expected = bytearray(sources[track])
    expected[20 * FRAME : 21 * FRAME] = SILENCE * FRAME  # its own slot was never filled
    expected[moved_to * FRAME : (moved_to + 1) * FRAME] = sources[track][20 * FRAME : 21 * FRAME]
    assert got[track] == bytes(expected)
    assert t.stats == JitterStats(duplicates=1, silence_samples=FRAME)


@pytest.mark.parametrize("restart_ms", [0, 3_000])
def test_a_clock_reset_backwards_drops_nothing(restart_ms: int) -> None:
    # At 5 s the stream's clock goes back (to 0, or by 2 s): the first chunks on the new
    # clock are placed after each track's audio, then the clock is rebased and they follow.
    before = call_chunks([frames(250, 1), frames(250, 2)])
    after = call_chunks([frames(250, 3), frames(250, 4)])
    chunks = [*before, *((track, ms + restart_ms, data) for track, ms, data in after)]
    t = Timeline(2)
    got = play(t, chunks)
    assert got == {0: frames(250, 1) + frames(250, 3), 1: frames(250, 2) + frames(250, 4)}
    assert t.stats == JitterStats(clock_jumps=1, misplaced=2)


def test_a_clock_step_forward_inserts_no_silence() -> None:
    # Twilio's clock never steps, so a step is no gap of the call: both tracks carry on.
    first, second = (
        call_chunks([frames(50, 1), frames(50, 2)]),
        call_chunks([frames(50, 3), frames(50, 4)]),
    )
    chunks = [*first, *((track, ms + 3_600_000, data) for track, ms, data in second)]
    t = Timeline(2)
    assert play(t, chunks) == {0: frames(50, 1) + frames(50, 3), 1: frames(50, 2) + frames(50, 4)}
    assert t.stats == JitterStats(clock_jumps=1, misplaced=2)


def test_a_mono_stream_that_starts_late_on_the_clock_starts_at_once() -> None:
    # An outbound-only stream's first chunk may be stamped when the callee answered.
    chunks = [(0, 12_000 + 20 * i, frames(1, i)) for i in range(10)]
    t = Timeline(1)
    assert play(t, chunks) == {0: b"".join(frames(1, i) for i in range(10))}
    assert t.stats == JitterStats(clock_jumps=1, misplaced=2)


def test_a_track_running_behind_keeps_every_chunk() -> None:
    # The outbound track comes 300 ms (15 frames) behind the inbound one, and loses one
    # chunk: only that chunk becomes silence, and the track is never filled ahead of it.
    sources = [frames(500, 1), frames(500, 2)]
    t = Timeline(2)
    got = play(t, call_chunks(sources, skew=(0, 15), lost=(set(), {200})))
    expected = sources[1][: 200 * FRAME] + SILENCE * FRAME + sources[1][201 * FRAME :]
    assert got == {0: sources[0], 1: expected}
    assert t.stats == JitterStats(silence_samples=FRAME)


def test_a_track_that_stops_is_filled_after_the_lag_and_resumes_in_place() -> None:
    # The outbound track sends nothing from 2 s to 7 s of a 10 s call.
    sources = [frames(500, 1), frames(500, 2)]
    stopped = set(range(100, 350))
    t = Timeline(2)
    out = {0: 0, 1: 0}
    for track, ms, data in call_chunks(sources, lost=(set(), stopped)):
        for p in t.push(track, ms, data):
            out[p.track] += len(p.data)
        # The channels keep together: the silent track is filled 3 s behind, no more.
        assert out[0] - 24_000 - FRAME <= out[1] <= out[0]
    placed = t.flush()
    got = {p.track: p.data for p in placed}
    assert out[0] + len(got.get(0, b"")) == out[1] + len(got.get(1, b"")) == 500 * FRAME
    assert t.stats == JitterStats(silence_samples=250 * FRAME)


def test_the_silenced_stretch_of_a_stopped_track_is_its_gap_exactly() -> None:
    sources = [frames(500, 1), frames(500, 2)]
    stopped = set(range(100, 350))
    got = play(Timeline(2), call_chunks(sources, lost=(set(), stopped)))
    gap = slice(100 * FRAME, 350 * FRAME)
    expected = sources[1][: gap.start] + SILENCE * (gap.stop - gap.start) + sources[1][gap.stop :]
    assert got == {0: sources[0], 1: expected}


def test_the_codec_places_a_call_with_one_bad_timestamp_whole() -> None:
    c = started()
    sources = [frames(250, 1), frames(250, 2)]
    chunks = restamped(call_chunks(sources), 101, 10**11)
    commands: list[Command] = []
    for track, ms, data in chunks:
        commands += c.decode(media(data, ms, ("inbound", "outbound")[track]))
    commands += c.decode(stop())
    assert (audio_of(commands, 0), audio_of(commands, 1)) == tuple(sources)
    assert (c.late, c.duplicates, c.stats.misplaced) == (0, 0, 1)


def test_too_many_held_chunks_force_the_oldest_hole_open() -> None:
    t = Timeline(1, JitterConfig(hold_ms=10_000, max_pending=4))
    data = frames(7)
    placed: list[Placed] = []
    for i in range(1, 7):  # the first frame never comes; the hold is long
        placed += t.push(0, 20 * i, data[i * FRAME : (i + 1) * FRAME])
    assert b"".join(p.data for p in placed) == SILENCE * FRAME + data[FRAME:]


def test_unstamped_chunks_follow_the_tracks_last_chunk() -> None:
    assert play(Timeline(1), [(0, 40, frames(1)), (0, None, frames(1, 2))]) == {  # type: ignore[list-item]
        0: SILENCE * 2 * FRAME + frames(1) + frames(1, 2)
    }


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    lost=st.sets(st.integers(0, 39), max_size=8),
    spread=st.floats(0, 8),
    duplicates=st.sets(st.integers(0, 39), max_size=5),
)
def test_placement_keeps_every_chunk_at_its_timestamp(
    seed: int, lost: set[int], spread: float, duplicates: set[int]
) -> None:
    """Whatever the order (within the hold), each track's output is its source with
    silence where chunks were lost, and both tracks end together."""
    sources = [frames(40, seed % 1000), frames(40, seed % 1000 + 1)]
    rng = random.Random(seed)
    chunks = [
        (track, 20 * i, sources[track][i * FRAME : (i + 1) * FRAME])
        for i in range(40)
        for track in (0, 1)
        if not (track == 0 and i in lost)
    ]
    chunks += [(1, 20 * i, sources[1][i * FRAME : (i + 1) * FRAME]) for i in duplicates]
    order = sorted(chunks, key=lambda c: c[1] / 20 + rng.uniform(0, spread))
    t = Timeline(2)
    got = play(t, order)
    expected = bytearray(sources[0])
    for i in lost:
        expected[i * FRAME : (i + 1) * FRAME] = SILENCE * FRAME
    assert got[0] == bytes(expected) and got[1] == sources[1]
    assert t.stats.duplicates == len(duplicates) and t.stats.late == 0


# ---- the codec over a real session core ------------------------------------------------


def twilio_frames(channels: Sequence[bytes], seed: int, spread: float) -> list[str]:
    """Both tracks as Twilio's 20 ms media messages, shuffled by up to `spread` frames."""
    rng = random.Random(seed)
    messages = []
    for i in range(len(channels[0]) // FRAME):
        for track, data in zip(("inbound", "outbound"), channels, strict=True):
            key = i + rng.uniform(0, spread)
            messages.append((key, media(data[i * FRAME : (i + 1) * FRAME], 20 * i, track)))
    return [m for _, m in sorted(messages, key=lambda m: m[0])]


def run_call(messages: Sequence[str]) -> list[SessionEvent]:
    config = SessionConfig(segmenter=SegmenterConfig(preroll_ms=0))
    core = SessionCore("s1", config, EnergyVadModel())
    c = codec()
    events: list[SessionEvent] = []
    for i, message in enumerate([connected(), start(), *messages, stop()]):
        for command in c.decode(message):
            core.handle(command, i * 0.02)
        for request in core.requests_to_submit():
            core.receive_result(answer(request), i * 0.02)
        events += core.events_to_send()
    return events


def test_a_shuffled_two_party_call_is_recognised_as_if_it_came_in_order() -> None:
    caller = encode_mulaw(tone_bursts([(0.5, 2.0), (3.0, 4.5)], 6.0, rate=8000))
    callee = encode_mulaw(tone_bursts([(2.2, 3.6)], 6.0, rate=8000))
    in_order = run_call(twilio_frames([caller, callee], 0, 0))
    shuffled = run_call(twilio_frames([caller, callee], 3, 4))
    configured = in_order[0]
    assert isinstance(configured, Configured)
    assert configured.stream_id == CALL and configured.channel_labels == ("inbound", "outbound")

    def finals(events: list[SessionEvent]) -> list[tuple[int | None, int, int, str]]:
        return [
            (e.channel, e.start_ms, e.end_ms, e.transcript.text)
            for e in events
            if isinstance(e, Final)
        ]

    assert finals(shuffled) == finals(in_order)
    spans = sorted((ch, round(a / 100), round(b / 100)) for ch, a, b, _ in finals(in_order))
    assert spans == [(0, 5, 20), (0, 30, 45), (1, 22, 36)]
    assert isinstance(in_order[-1], Ended)


# ---- X-Twilio-Signature ------------------------------------------------------------------

# Twilio's worked example (its request validators' tests): a form POST to this URL.
EXAMPLE_TOKEN = "12345"
EXAMPLE_URL = "https://mycompany.com/myapp.php?foo=1&bar=2"
EXAMPLE_PARAMS = {
    "CallSid": "CA1234567890ABCDE",
    "Caller": "+14158675309",
    "Digits": "1234",
    "From": "+14158675309",
    "To": "+18005551212",
}


def test_the_signature_is_twilios_for_its_worked_example() -> None:
    expected = "RSOYDt4T1cUTdK1PDd93/VVr8B8="
    assert twilio_signature(EXAMPLE_TOKEN, EXAMPLE_URL, EXAMPLE_PARAMS) == expected
    assert signature_valid(EXAMPLE_TOKEN, EXAMPLE_URL, expected, EXAMPLE_PARAMS)
    assert not signature_valid("54321", EXAMPLE_URL, expected, EXAMPLE_PARAMS)
    assert not signature_valid(EXAMPLE_TOKEN, EXAMPLE_URL, expected, {})


@pytest.mark.parametrize(
    ("url", "signature"),
    [
        (EXAMPLE_URL.replace(".com", ".com:1234"), "RSOYDt4T1cUTdK1PDd93/VVr8B8="),
        (EXAMPLE_URL, "kvajT1Ptam85bY51eRf/AJRuM3w="),  # Twilio signed it with :443
        (EXAMPLE_URL.replace("https", "http"), "0ZXoZLH/DfblKGATFgpif+LLRf4="),  # with :80
    ],
)
def test_the_url_is_tried_with_and_without_its_port(url: str, signature: str) -> None:
    assert signature_valid(EXAMPLE_TOKEN, url, signature, EXAMPLE_PARAMS)


def test_url_variants() -> None:
    assert url_variants("wss://a.example/twilio") == (
        "wss://a.example/twilio",
        "wss://a.example:443/twilio",
    )
    assert url_variants("ws://127.0.0.1:8765/twilio") == (
        "ws://127.0.0.1:8765/twilio",
        "ws://127.0.0.1/twilio",
    )
    assert url_variants("ws://h:x/t") == ("ws://h:x/t",)


URL = "wss://asr.example.com/twilio"
TOKEN = "twilio-auth-token"


def handshake(url: str = URL, signature: str | None = None) -> Handshake:
    headers = {} if signature is None else {"x-twilio-signature": signature}
    return Handshake({}, headers, url)


def test_a_signed_handshake_is_accepted() -> None:
    settings = CodecSettings(twilio_auth_token=TOKEN)
    signed = handshake(signature=twilio_signature(TOKEN, URL))
    assert isinstance(make_twilio_codec(signed, settings), TwilioCodec)
    # Without a token configured, nothing is checked (the route's size probe included).
    assert isinstance(make_twilio_codec(Handshake(), CodecSettings()), TwilioCodec)


@pytest.mark.parametrize(
    "hs",
    [
        handshake(),
        handshake(signature=""),
        handshake(signature="bm90IGEgc2lnbmF0dXJl"),
        handshake(signature=twilio_signature("another-token", URL)),
        handshake(signature=twilio_signature(TOKEN, URL + "/other")),
        handshake(url=URL.replace("wss", "ws"), signature=twilio_signature(TOKEN, URL)),
    ],
)
def test_an_unsigned_or_wrongly_signed_handshake_is_refused(hs: Handshake) -> None:
    with pytest.raises(UnauthorizedError):
        make_twilio_codec(hs, CodecSettings(twilio_auth_token=TOKEN))


def test_silence_fill_is_decodable_mulaw_zero() -> None:
    assert ulaw_to_linear()[MULAW_SILENCE] == 0
    assert np.all(ulaw_to_linear()[np.frombuffer(SILENCE * 4, np.uint8)] == 0)


def test_the_emulators_shuffled_stream_decodes_to_its_tracks() -> None:
    outbound = frames(30, 2)[:-40]  # a track may end a little early
    call = TwilioCall(frames(30, 1), outbound, parameters={"api_key": KEY})
    messages = media_messages(call, shuffle_frames=3, seed=5)
    assert [json.loads(m)["media"]["track"] for m in messages] != ["inbound", "outbound"] * 30
    c = codec()
    commands = [*c.decode(connected()), *c.decode(json.dumps(start_message(call)))]
    for message in messages:
        commands += c.decode(message)
    commands += c.decode(json.dumps(stop_message(call, len(messages) + 2)))
    assert commands[0] == Configure(
        AudioFormat("mulaw", 8000, 2), StreamOptions(), ("inbound", "outbound"), call.call_sid
    )
    assert audio_of(commands, 0) == call.inbound
    assert audio_of(commands, 1) == outbound + SILENCE * 40  # both tracks end together
    assert commands[-1] == Stop() and (c.late, c.duplicates) == (0, 0)
