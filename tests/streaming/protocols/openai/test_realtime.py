"""OpenAI Realtime transcription codec: every client event and error path, both dialects,
server events, and a real Session driven through the codec without sockets."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.types import (
    MAX_HOTWORDS,
    Hotword,
    InferenceRequest,
    InferenceResult,
    RequestKind,
    Token,
    Transcript,
)
from streaming.audio.decoder import AudioFormat
from streaming.commands import (
    MAX_PROMPT_CHARS,
    Audio,
    Clear,
    Command,
    Commit,
    Configure,
    StreamOptions,
    TurnDetection,
)
from streaming.errors import (
    EmptyCommitError,
    FrameTooLargeError,
    InvalidAudioError,
    MalformedMessageError,
    ProtocolError,
    ServerFullError,
    SessionLimitError,
    StateError,
    UnknownMessageTypeError,
)
from streaming.events import (
    Cleared,
    Committed,
    Configured,
    Ended,
    ErrorEvent,
    Failed,
    Final,
    Partial,
    SessionEvent,
    SpeechStarted,
    SpeechStopped,
    StopCause,
)
from streaming.limits import SessionLimits
from streaming.protocols.base import Handshake
from streaming.protocols.openai.fields import MAX_ITEMS, LockedSettingError, RealtimeFieldError
from streaming.protocols.openai.realtime import MAX_AUDIO_CHARS, OpenAIRealtimeCodec
from streaming.session import Session, SessionConfig
from tests.streaming.fakes import EnergyVadModel, fake_transcript, tone_bursts, word_transcript

Wire = dict[str, Any]
MODEL = "SenseVoiceSmall"
BETA = {"openai-beta": "realtime=v1"}


def codec(headers: dict[str, str] | None = None, **query: str) -> OpenAIRealtimeCodec:
    handshake = Handshake({k: [v] for k, v in query.items()}, headers or {})
    return OpenAIRealtimeCodec(handshake, SessionLimits(), ids="t")


def msg(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields})


def append(data: bytes, **fields: Any) -> str:
    return msg("input_audio_buffer.append", audio=base64.b64encode(data).decode(), **fields)


def ga_update(audio_input: dict[str, Any] | None = None, **fields: Any) -> str:
    session: dict[str, Any] = {"type": "transcription", **fields}
    if audio_input is not None:
        session["audio"] = {"input": audio_input}
    return msg("session.update", session=session)


def beta_update(**session: Any) -> str:
    return msg("transcription_session.update", session=session)


def configured(command: Command, session_id: str = "s1") -> Configured:
    """The event the session answers a Configure with."""
    assert isinstance(command, Configure)
    return Configured(session_id, command.audio, command.options, MODEL, False)


def encode(c: OpenAIRealtimeCodec, *events: SessionEvent) -> list[Wire]:
    return [json.loads(frame) for e in events for frame in c.encode(e)]


def announce(c: OpenAIRealtimeCodec, commands: Sequence[Command]) -> Wire:
    """Decode-side commands as the session would answer them: one session event."""
    (command,) = commands
    (event,) = encode(c, configured(command))
    return event


def rejected(c: OpenAIRealtimeCodec, message: str) -> tuple[ProtocolError, Wire]:
    """A message the codec refuses, and the `error` event that reports it."""
    with pytest.raises(ProtocolError) as info:
        c.decode(message)
    exc = info.value
    (event,) = encode(c, ErrorEvent(exc.code, exc.message))
    assert event["type"] == "error"
    return exc, event["error"]


# ---- session objects and updates ------------------------------------------------------


def test_default_session_is_pcm16_24k_with_server_vad_and_auto_language() -> None:
    c = codec(model="gpt-4o-transcribe", intent="transcription")
    (command,) = c.opening()
    assert isinstance(command, Configure)
    assert command.audio == AudioFormat("pcm_s16le", 24000, 1)
    assert command.options.turns == TurnDetection(vad=True)
    assert command.options.language == "auto" and command.options.pace == "live"
    created = announce(c, (command,))
    assert created["type"] == "session.created" and created["event_id"]
    session = created["session"]
    assert session["type"] == "transcription" and session["id"] == "sess_s1"
    audio_in = session["audio"]["input"]
    assert audio_in["format"] == {"type": "audio/pcm", "rate": 24000}
    assert audio_in["transcription"] == {
        "model": "gpt-4o-transcribe",
        "language": None,
        "prompt": "",
    }
    # null durations: the server's own VAD settings.
    assert audio_in["turn_detection"] == {
        "type": "server_vad",
        "threshold": None,
        "prefix_padding_ms": None,
        "silence_duration_ms": None,
    }
    assert audio_in["noise_reduction"] is None and session["include"] is None


def test_session_object_names_the_served_model_when_the_client_names_none() -> None:
    c = codec()
    created = announce(c, c.opening())
    assert created["session"]["audio"]["input"]["transcription"]["model"] == MODEL


def test_ga_update_as_the_sdk_sends_it() -> None:
    c = codec()
    announce(c, c.opening())
    update = ga_update(
        {
            "format": {"type": "audio/pcm", "rate": 24000},
            "transcription": {"model": "whisper-1", "language": "en", "prompt": "names"},
            "turn_detection": None,
            "noise_reduction": {"type": "near_field"},
        },
        include=["item.input_audio_transcription.logprobs"],
    )
    (command,) = c.decode(update)
    assert isinstance(command, Configure)
    assert command.audio == AudioFormat("pcm_s16le", 24000, 1)
    assert command.options.turns == TurnDetection(vad=False)
    assert command.options.language == "en" and command.options.prompt == "names"
    updated = announce(c, (command,))
    assert updated["type"] == "session.updated"
    audio_in = updated["session"]["audio"]["input"]
    assert audio_in["turn_detection"] is None
    assert audio_in["noise_reduction"] == {"type": "near_field", "strength": None}
    assert audio_in["transcription"] == {"model": "whisper-1", "language": "en", "prompt": "names"}
    assert updated["session"]["include"] == ["item.input_audio_transcription.logprobs"]


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ({"type": "audio/pcmu"}, AudioFormat("mulaw", 8000, 1)),
        ({"type": "audio/pcma"}, AudioFormat("alaw", 8000, 1)),
        ({"type": "audio/pcm"}, AudioFormat("pcm_s16le", 24000, 1)),
        # An extension: audio/pcm at any rate the decoder takes.
        ({"type": "audio/pcm", "rate": 16000}, AudioFormat("pcm_s16le", 16000, 1)),
    ],
)
def test_ga_formats(fmt: dict[str, Any], expected: AudioFormat) -> None:
    c = codec()
    (command,) = c.decode(ga_update({"format": fmt}))
    assert isinstance(command, Configure) and command.audio == expected
    rendered = announce(c, (command,))["session"]["audio"]["input"]["format"]
    assert rendered == (fmt if fmt["type"] != "audio/pcm" else {"rate": 24000, **fmt})


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("pcm16", AudioFormat("pcm_s16le", 24000, 1)),
        ("g711_ulaw", AudioFormat("mulaw", 8000, 1)),
        ("g711_alaw", AudioFormat("alaw", 8000, 1)),
    ],
)
def test_beta_formats(name: str, expected: AudioFormat) -> None:
    c = codec(BETA)
    (command,) = c.decode(beta_update(input_audio_format=name))
    assert isinstance(command, Configure) and command.audio == expected
    assert announce(c, (command,))["session"]["input_audio_format"] == name


def test_beta_dialect_from_the_header_and_the_update_as_the_sdk_sends_it() -> None:
    c = codec(BETA, model="whisper-1", intent="transcription")
    created = announce(c, c.opening())
    assert created["type"] == "transcription_session.created"
    assert created["session"]["input_audio_format"] == "pcm16"
    assert created["session"]["modalities"] == ["text"]
    update = beta_update(
        input_audio_format="pcm16",
        input_audio_transcription={"model": "whisper-1", "language": "zh", "prompt": ""},
        turn_detection={
            "type": "server_vad",
            "threshold": 0.5,
            "prefix_padding_ms": 300,
            "silence_duration_ms": 800,
        },
        input_audio_noise_reduction={"type": "far_field"},
        include=["item.input_audio_transcription.logprobs"],
        modalities=["text"],
    )
    (command,) = c.decode(update)
    assert isinstance(command, Configure)
    assert command.options.turns == TurnDetection(True, end_silence_ms=800, preroll_ms=300)
    assert command.options.language == "zh"
    updated = announce(c, (command,))
    assert updated["type"] == "transcription_session.updated"
    assert updated["session"]["turn_detection"] == {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 800,
    }
    assert updated["session"]["input_audio_noise_reduction"]["type"] == "far_field"


def test_each_update_is_answered_in_its_own_dialect() -> None:
    c = codec()
    assert announce(c, c.opening())["type"] == "session.created"
    beta = announce(c, c.decode(beta_update(input_audio_format="g711_ulaw")))
    assert beta["type"] == "transcription_session.updated"
    ga = announce(c, c.decode(ga_update()))
    assert ga["type"] == "session.updated"
    assert ga["session"]["audio"]["input"]["format"] == {"type": "audio/pcmu"}


def test_two_quick_updates_are_each_answered_with_their_own_settings() -> None:
    c = codec()
    c.opening()
    first = c.decode(ga_update({"transcription": {"language": "en"}}))
    second = c.decode(ga_update({"transcription": {"language": "ja"}}))
    # The session answers both only after both were decoded (events queue behind the socket).
    created, one, two = encode(c, configured(c.opening()[0]), *map(configured, [*first, *second]))
    assert created["type"] == "session.created"
    assert one["session"]["audio"]["input"]["transcription"]["language"] == "en"
    assert two["session"]["audio"]["input"]["transcription"]["language"] == "ja"


def test_updates_are_partial_and_null_clears() -> None:
    c = codec()
    c.decode(ga_update({"transcription": {"model": "m1", "language": "ko", "prompt": "p"}}))
    (command,) = c.decode(ga_update({"transcription": {"model": "m2"}}))
    assert isinstance(command, Configure)
    assert (command.options.language, command.options.prompt) == ("ko", "p")
    (command,) = c.decode(ga_update({"turn_detection": None}))
    assert isinstance(command, Configure) and command.options.turns == TurnDetection(vad=False)
    (command,) = c.decode(ga_update({"format": {"type": "audio/pcmu"}}))
    assert isinstance(command, Configure) and not command.options.turns.vad  # kept
    (command,) = c.decode(ga_update({"turn_detection": {"type": "semantic_vad"}}))
    assert isinstance(command, Configure) and command.options.turns == TurnDetection(vad=True)
    (command,) = c.decode(ga_update({"transcription": None}))
    assert isinstance(command, Configure) and command.options.language == "auto"


@pytest.mark.parametrize(
    ("given", "language"),
    [
        ("en", "en"),
        ("en-US", "en"),
        ("ZH", "zh"),
        ("zh_TW", "zh"),
        ("yue", "yue"),
        ("ja", "ja"),
        ("ko", "ko"),
        (None, "auto"),
        ("", "auto"),
        ("auto", "auto"),
    ],
)
def test_languages_map_to_sensevoice(given: str | None, language: str) -> None:
    (command,) = codec().decode(ga_update({"transcription": {"language": given}}))
    assert isinstance(command, Configure) and command.options.language == language


def test_keywords_become_hotwords_and_are_echoed() -> None:
    c = codec()
    (command,) = c.decode(ga_update({"transcription": {"keywords": ["SenseVoice", "FunASR"]}}))
    assert isinstance(command, Configure)
    assert command.options.hotwords == (Hotword("SenseVoice"), Hotword("FunASR"))
    transcription = announce(c, (command,))["session"]["audio"]["input"]["transcription"]
    assert transcription["keywords"] == ["SenseVoice", "FunASR"]


INPUT = "session.audio.input"
FMT, TD, TR = f"{INPUT}.format", f"{INPUT}.turn_detection", f"{INPUT}.transcription"
BTD, BTR = "session.turn_detection", "session.input_audio_transcription"
BSIL = f"{BTD}.silence_duration_ms"
VALUE, TYPE, UNKNOWN, MISSING = (
    "invalid_value",
    "invalid_type",
    "unknown_parameter",
    "missing_required_parameter",
)


def turn(**fields: Any) -> str:
    return ga_update({"turn_detection": fields})


def transcription(**fields: Any) -> str:
    return ga_update({"transcription": fields})


KEYWORDS = [f"w{i}" for i in range(MAX_HOTWORDS)]
BKW = f"{BTR}.keywords"
PROMPT_REPEATS = MAX_PROMPT_CHARS // len("Say it slowly. ") + 1
LOGPROBS = "item.input_audio_transcription.logprobs"


@pytest.mark.parametrize(
    ("message", "code", "param"),
    [
        (ga_update({"transcription": {"language": "fr"}}), VALUE, f"{TR}.language"),
        (ga_update({"transcription": {"prompt": 3}}), TYPE, f"{TR}.prompt"),
        (ga_update({"transcription": {"keywords": "a,b"}}), TYPE, f"{TR}.keywords"),
        (ga_update({"format": {"type": "audio/wav"}}), VALUE, f"{FMT}.type"),
        (ga_update({"format": {"type": "audio/pcm", "rate": 12345}}), VALUE, f"{FMT}.rate"),
        (ga_update({"format": {"type": "audio/pcmu", "rate": 16000}}), VALUE, f"{FMT}.rate"),
        (ga_update({"format": {"rate": 24000}}), MISSING, f"{FMT}.type"),
        (ga_update({"format": "pcm16"}), TYPE, FMT),
        (turn(type="push_to_talk"), VALUE, f"{TD}.type"),
        (turn(silence_duration_ms=20), VALUE, f"{TD}.silence_duration_ms"),
        (turn(silence_duration_ms=True), TYPE, f"{TD}.silence_duration_ms"),
        (turn(prefix_padding_ms=5000), VALUE, f"{TD}.prefix_padding_ms"),
        (turn(prefix_padding_ms="300"), TYPE, f"{TD}.prefix_padding_ms"),
        (turn(threshold=1.5), VALUE, f"{TD}.threshold"),
        (turn(eagerness="eager"), VALUE, f"{TD}.eagerness"),
        (turn(create_response=1), TYPE, f"{TD}.create_response"),
        (ga_update({"noise_reduction": {"type": "x"}}), VALUE, f"{INPUT}.noise_reduction.type"),
        (ga_update({"voice": "alloy"}), UNKNOWN, f"{INPUT}.voice"),
        (ga_update({"output": 1}), UNKNOWN, f"{INPUT}.output"),
        (ga_update(voice="alloy"), UNKNOWN, "session.voice"),
        (ga_update(include=["logprobs"]), VALUE, "session.include[0]"),
        (msg("session.update", session={"type": "realtime", "voice": "x"}), VALUE, "session.type"),
        (msg("session.update", session={"audio": {}}), MISSING, "session.type"),
        (msg("session.update"), MISSING, "session"),
        (msg("session.update", session=[]), TYPE, "session"),
        (msg("session.update", session={}, extra=1), UNKNOWN, "extra"),
        (beta_update(input_audio_format="mp3"), VALUE, "session.input_audio_format"),
        (beta_update(turn_detection={"silence_duration_ms": 1}), VALUE, BSIL),
        (beta_update(input_audio_transcription={"language": "de"}), VALUE, f"{BTR}.language"),
        (beta_update(voice="alloy"), UNKNOWN, "session.voice"),
        # Lists and texts past their caps are refused by their length, before their items
        # are read or any hotword is made: the last item here is not even a string.
        (transcription(keywords=["Acme"] * (MAX_HOTWORDS + 1)), VALUE, f"{TR}.keywords"),
        (transcription(keywords=[*KEYWORDS, 7]), VALUE, f"{TR}.keywords"),
        (beta_update(input_audio_transcription={"keywords": [*KEYWORDS, "x"]}), VALUE, BKW),
        (transcription(prompt="Say it slowly. " * PROMPT_REPEATS), VALUE, f"{TR}.prompt"),
        (transcription(languages=["en"] * (MAX_ITEMS + 1)), VALUE, f"{TR}.languages"),
        (ga_update(include=[LOGPROBS] * (MAX_ITEMS + 1)), VALUE, "session.include"),
        (beta_update(modalities=["text"] * (MAX_ITEMS + 1)), VALUE, "session.modalities"),
    ],
)  # fmt: skip
def test_bad_updates_are_reported_with_openai_codes_and_not_applied(
    message: str, code: str, param: str
) -> None:
    c = codec()
    (before,) = c.opening()
    exc, error = rejected(c, message)
    assert not c.is_fatal(exc)
    assert error["type"] == "invalid_request_error"
    assert (error["code"], error["param"]) == (code, param), error["message"]
    # The failed update changed nothing: the next one starts from the old settings.
    (after,) = c.decode(ga_update())
    assert after == before


def test_lists_and_prompts_up_to_their_caps_are_taken() -> None:
    c = codec()
    prompt = ("Say it slowly. " * PROMPT_REPEATS)[:MAX_PROMPT_CHARS]
    transcription = {"keywords": KEYWORDS, "prompt": prompt, "languages": ["en"] * MAX_ITEMS}
    (command,) = c.decode(ga_update({"transcription": transcription}))
    assert isinstance(command, Configure)
    assert [h.phrase for h in command.options.hotwords] == KEYWORDS
    assert command.options.prompt == prompt
    (command,) = c.decode(ga_update(include=[LOGPROBS] * MAX_ITEMS))
    assert isinstance(command, Configure)


def ascii_only(hotwords: Sequence[Hotword]) -> str | None:
    """A model that writes ASCII only (the server asks the model's tokenizer)."""
    bad = [h.phrase for h in hotwords if not h.phrase.isascii()]
    return f"cannot write {bad}" if bad else None


@pytest.mark.parametrize(
    ("message", "param"),
    [
        (ga_update({"transcription": {"keywords": ["Acme", "Zo\u00eb"]}}), f"{TR}.keywords"),
        (ga_update({"transcription": {"keywords": ["A"], "prompt": "Zo\u00eb"}}), f"{TR}.prompt"),
        (beta_update(input_audio_transcription={"prompt": "Acme, Zo\u00eb"}), f"{BTR}.prompt"),
    ],
)  # fmt: skip
def test_hotwords_the_model_cannot_write_are_refused_and_not_applied(
    message: str, param: str
) -> None:
    handshake = Handshake({}, BETA if "transcription_session" in message else {})
    c = OpenAIRealtimeCodec(handshake, SessionLimits(), ids="t", hotword_refusal=ascii_only)
    (before,) = c.opening()
    exc, error = rejected(c, message)
    assert not c.is_fatal(exc) and "Zo\u00eb" in error["message"]
    assert (error["code"], error["param"]) == ("unsupported_hotword", param)
    (after,) = c.decode(ga_update() if not handshake.headers else beta_update())
    assert after == before


# ---- audio, commit, clear ---------------------------------------------------------------


def test_append_carries_base64_audio() -> None:
    c = codec()
    assert c.decode(append(b"\x01\x02\x03\x04")) == (Audio(b"\x01\x02\x03\x04"),)
    assert c.decode(append(b"")) == ()


def test_a_long_append_reaches_the_core_a_second_at_a_time() -> None:
    c = codec()
    data = np.arange(24000 * 7 // 2, dtype="<i2").tobytes()  # 3.5 s of pcm16 at 24 kHz
    commands = c.decode(append(data))
    assert all(isinstance(a, Audio) for a in commands)
    sizes = [len(a.data) for a in commands if isinstance(a, Audio)]
    assert sizes == [48000, 48000, 48000, 24000]
    assert b"".join(a.data for a in commands if isinstance(a, Audio)) == data


def test_commit_and_clear() -> None:
    c = codec()
    assert c.decode(msg("input_audio_buffer.commit", event_id="c1")) == (Commit(),)
    assert c.decode(msg("input_audio_buffer.clear")) == (Clear(),)


BUFFER = "input_audio_buffer"


@pytest.mark.parametrize(
    ("message", "error", "code", "param"),
    [
        ("{not json", MalformedMessageError, "invalid_json", None),
        ("[1, 2]", MalformedMessageError, "invalid_json", None),
        (b"\xff\xfe", MalformedMessageError, "invalid_json", None),
        ('{"event_id": "e"}', RealtimeFieldError, MISSING, "type"),
        (msg("response.create"), UnknownMessageTypeError, VALUE, "type"),
        ('{"type": 7}', UnknownMessageTypeError, VALUE, "type"),
        (msg(f"{BUFFER}.commit", event_id=5), RealtimeFieldError, TYPE, "event_id"),
        (msg(f"{BUFFER}.commit", now=True), RealtimeFieldError, UNKNOWN, "now"),
        (msg(f"{BUFFER}.clear", all=1), RealtimeFieldError, UNKNOWN, "all"),
        (msg(f"{BUFFER}.append"), RealtimeFieldError, MISSING, "audio"),
        (msg(f"{BUFFER}.append", audio=[1]), RealtimeFieldError, TYPE, "audio"),
        (msg(f"{BUFFER}.append", audio="not base64!"), RealtimeFieldError, VALUE, "audio"),
        (msg(f"{BUFFER}.append", audio="AAA"), RealtimeFieldError, VALUE, "audio"),
    ],
)
def test_bad_client_events_are_reported_and_the_stream_goes_on(
    message: str | bytes, error: type[ProtocolError], code: str, param: str | None
) -> None:
    c = codec()
    exc, body = rejected(c, message)  # type: ignore[arg-type]
    assert isinstance(exc, error) and not c.is_fatal(exc)
    assert (body["type"], body["code"], body["param"]) == ("invalid_request_error", code, param)
    assert body["message"] == exc.message


def test_json_in_a_binary_frame_is_taken_as_text() -> None:
    assert codec().decode(msg("input_audio_buffer.clear").encode()) == (Clear(),)


def test_an_error_names_the_client_event_that_caused_it() -> None:
    c = codec()
    _, error = rejected(c, msg("input_audio_buffer.append", event_id="a7", audio="%%"))
    assert error["event_id"] == "a7"
    _, error = rejected(c, msg("response.create", event_id="r1"))
    assert error["event_id"] == "r1"
    _, error = rejected(c, "{bad")
    assert error["event_id"] is None


def test_errors_pair_with_their_notes_in_order() -> None:
    c = codec()
    errors = []
    for event_id in ("x1", "x2"):
        with pytest.raises(ProtocolError) as info:
            c.decode(msg("nope", event_id=event_id))
        errors.append(ErrorEvent(info.value.code, info.value.message))
    # A server error in between has no client event; the next ones still pair correctly.
    reported = encode(c, errors[0], ErrorEvent("internal_error", "boom"), errors[1])
    assert [e["error"]["event_id"] for e in reported] == ["x1", None, "x2"]
    assert reported[1]["error"]["type"] == "server_error"
    assert reported[1]["error"]["code"] == "internal_error"


def test_oversized_audio_is_fatal_with_1009() -> None:
    c = codec()
    huge = msg("input_audio_buffer.append", audio="A" * (MAX_AUDIO_CHARS + 4))
    with pytest.raises(FrameTooLargeError) as info:
        c.decode(huge)
    assert c.is_fatal(info.value) and c.close_code(info.value) == 1009
    assert c.max_message_bytes > len(huge)


@pytest.mark.parametrize(
    ("error", "fatal"),
    [
        (FrameTooLargeError("big"), True),
        (SessionLimitError("long"), True),
        (ServerFullError("full"), True),
        (EmptyCommitError("empty"), False),
        (StateError("late"), False),
        (InvalidAudioError("bad"), False),
        (MalformedMessageError("json"), False),
        (UnknownMessageTypeError("what"), False),
        (LockedSettingError("locked", "session.audio.input.format"), False),
    ],
)
def test_only_errors_that_end_streams_anyway_are_fatal(error: ProtocolError, fatal: bool) -> None:
    c = codec()
    assert c.is_fatal(error) is fatal
    assert c.close_code(error) == error.close_code


def test_format_and_turn_detection_are_locked_once_audio_flows() -> None:
    c = codec()
    c.opening()
    c.decode(ga_update({"format": {"type": "audio/pcmu"}}))  # before audio: fine
    c.decode(append(b"\xff" * 80))
    exc, error = rejected(c, ga_update({"format": {"type": "audio/pcm"}}))
    assert isinstance(exc, LockedSettingError) and not c.is_fatal(exc)
    assert (error["code"], error["param"]) == ("invalid_value", f"{INPUT}.format")
    _, error = rejected(c, beta_update(turn_detection=None))
    assert error["param"] == "session.turn_detection"
    _, error = rejected(c, ga_update({"turn_detection": {"silence_duration_ms": 900}}))
    assert error["param"] == f"{INPUT}.turn_detection"
    # What the VAD does not use, and the options, may still change.
    (command,) = c.decode(ga_update({"turn_detection": {"threshold": 0.9}}))
    (command,) = c.decode(ga_update({"transcription": {"language": "en", "prompt": "x"}}))
    assert isinstance(command, Configure) and command.audio == AudioFormat("mulaw", 8000, 1)


# ---- server events ----------------------------------------------------------------------


def transcript(text: str, tokens: tuple[Token, ...] = ()) -> Transcript:
    return Transcript(text, "en", "happy", "Speech", True, f"{text}😊", tokens)


def vad_codec() -> OpenAIRealtimeCodec:
    c = codec()
    encode(c, configured(c.opening()[0]))
    return c


def test_speech_events_share_the_item_id_and_chain_previous_items() -> None:
    c = vad_codec()
    wire = encode(
        c,
        SpeechStarted(0, 1000),
        SpeechStopped(0, 1000, 2500, StopCause.VAD),
        SpeechStarted(1, 3000),
        SpeechStopped(1, 3000, 4000, StopCause.MAX_LENGTH),
    )
    assert [w["type"] for w in wire] == [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
    ] * 2
    assert wire[0]["audio_start_ms"] == 1000 and wire[1]["audio_end_ms"] == 2500
    first, second = wire[0]["item_id"], wire[3]["item_id"]
    assert first != second
    assert {w["item_id"] for w in wire[:3]} == {first}
    assert wire[2]["previous_item_id"] is None and wire[5]["previous_item_id"] == first


def test_without_server_vad_only_commits_are_reported() -> None:
    c = codec()
    (command,) = c.decode(ga_update({"turn_detection": None}))
    encode(c, configured(command))
    wire = encode(c, SpeechStarted(0, 0), SpeechStopped(0, 0, 900, StopCause.COMMIT))
    assert [w["type"] for w in wire] == ["input_audio_buffer.committed"]


def test_deltas_only_append_the_growth_of_the_stable_prefix() -> None:
    c = vad_codec()
    partials = [
        Partial(0, 0, 500, "hel", 0),  # nothing is stable yet
        Partial(0, 0, 900, "hello wo", 3),  # "hel"
        Partial(0, 0, 1300, "hello world", 8),  # "lo wo"
        Partial(0, 0, 1500, "hello there", 6),  # stable shrank: nothing to add
        Partial(0, 0, 1700, "help me", 3),  # revised below what was sent: nothing
        Partial(0, 0, 1900, "hello worlds", 11),  # "rld"
    ]
    wire = encode(c, *partials)
    assert [w["delta"] for w in wire] == ["hel", "lo wo", "rld"]
    assert all(w["type"] == "conversation.item.input_audio_transcription.delta" for w in wire)
    assert {w["item_id"] for w in wire} == {"item_t_0"}
    assert all(w["content_index"] == 0 for w in wire)


def test_completed_carries_the_final_and_sensevoice_extras() -> None:
    c = vad_codec()
    encode(c, Partial(0, 1000, 1400, "hi th", 3), Partial(0, 1000, 1800, "hi the", 5))
    tokens = (Token(1, "hi", 0, 200), Token(2, " there", 200, 600))
    final = Final(0, 1000, 1600, transcript("hi there", tokens), decided_ms=2100)
    delta, completed = encode(c, final)
    # A last delta completes the text the deltas had not yet carried.
    assert delta["delta"] == "ere"
    assert completed["type"] == "conversation.item.input_audio_transcription.completed"
    assert completed["transcript"] == "hi there" and completed["item_id"] == "item_t_0"
    assert completed["usage"] == {"type": "duration", "seconds": 0.6}
    assert completed["sensevoice"] == {
        "start_ms": 1000,
        "end_ms": 1600,
        "language": "en",
        "emotion": "happy",
        "event": "Speech",
        "rich_text": "hi there😊",
        "itn": True,
        "tokens": [
            {"text": "hi", "start_ms": 1000, "end_ms": 1200},
            {"text": " there", "start_ms": 1200, "end_ms": 1600},
        ],
        "words": [
            {"text": "hi", "start_ms": 1000, "end_ms": 1200},
            {"text": "there", "start_ms": 1200, "end_ms": 1600},
        ],
    }


def test_committed_text_goes_out_as_deltas_that_join_to_completed() -> None:
    c = vad_codec()
    wire = encode(
        c,
        Committed(0, 0, 900, "Hello,"),
        Partial(0, 0, 1300, "Hello, how are", 6),  # its stable prefix went out already
        Committed(0, 900, 1800, " how are you?"),
        Final(0, 0, 2600, transcript("Hello, how are you? Fine.")),
    )
    deltas = [w["delta"] for w in wire if w["type"].endswith(".delta")]
    assert deltas == ["Hello,", " how are you?", " Fine."]
    (completed,) = [w for w in wire if w["type"].endswith(".completed")]
    assert "".join(deltas) == completed["transcript"]


def test_a_final_that_revises_sent_text_comes_without_a_delta() -> None:
    c = vad_codec()
    encode(c, Partial(0, 0, 400, "hello", 0), Partial(0, 0, 800, "hello", 5))
    (completed,) = encode(c, Final(0, 0, 900, transcript("yellow")))
    assert completed["transcript"] == "yellow"
    (completed,) = encode(c, Final(1, 0, 900, transcript("")))
    assert completed["transcript"] == ""


# ---- logprobs ---------------------------------------------------------------------------


def scored_tokens(*pieces: tuple[str, float | None]) -> tuple[Token, ...]:
    """Tokens of 100 ms each with their log-probabilities (None: unscored, or redacted)."""
    return tuple(
        Token(k + 1, text, 100 * k, 100 * k + 90, logprob=lp) for k, (text, lp) in enumerate(pieces)
    )


def logprobs_codec(
    update: Callable[..., str] = ga_update, headers: dict[str, str] | None = None
) -> OpenAIRealtimeCodec:
    """A codec whose session includes the tokens' log-probabilities, announced."""
    c = codec(headers)
    encode(c, configured(c.opening()[0]))
    announce(c, c.decode(update(include=[LOGPROBS])))
    return c


def options_after(c: OpenAIRealtimeCodec, update: str) -> StreamOptions:
    (command,) = c.decode(update)
    assert isinstance(command, Configure)
    return command.options


@pytest.mark.parametrize(("update", "headers"), [(ga_update, None), (beta_update, BETA)])
def test_including_logprobs_asks_the_session_to_score(
    update: Callable[..., str], headers: dict[str, str] | None
) -> None:
    c = codec(headers)
    (opening,) = c.opening()
    assert isinstance(opening, Configure) and opening.options.confidence is None
    assert options_after(c, update(include=[LOGPROBS])).confidence is True
    # An update that does not name include keeps it; an empty or null one drops it.
    assert options_after(c, update()).confidence is True
    assert options_after(c, update(include=[])).confidence is None
    assert options_after(c, update(include=[LOGPROBS])).confidence is True
    assert options_after(c, update(include=None)).confidence is None


def entry(token: str, logprob: float | None) -> Wire:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}


@pytest.mark.parametrize(("update", "headers"), [(ga_update, None), (beta_update, BETA)])
def test_completed_carries_each_tokens_logprob_when_the_session_includes_them(
    update: Callable[..., str], headers: dict[str, str] | None
) -> None:
    c = logprobs_codec(update, headers)
    tokens = scored_tokens((" hi", -0.5), (" thé", -0.25), ("re", None))
    delta, completed = encode(c, Final(0, 0, 900, transcript("hi thére", tokens)))
    expected = [entry("hi", -0.5), entry(" thé", -0.25), entry("re", None)]
    assert completed["logprobs"] == expected
    assert "".join(e["token"] for e in completed["logprobs"]) == completed["transcript"]
    # The completing delta carried all the text, so all the tokens.
    assert delta["delta"] == "hi thére" and delta["logprobs"] == expected
    # A final with no text has an empty list: the client asked, nothing was said.
    (empty,) = encode(c, Final(1, 1000, 1500, transcript("")))
    assert empty["logprobs"] == []


def test_logprobs_follow_each_update_as_the_session_answers_it() -> None:
    c = vad_codec()
    first = c.decode(ga_update(include=[LOGPROBS]))
    second = c.decode(ga_update(include=[]))
    final = Final(
        0,
        0,
        900,
        transcript(
            "hi",
            scored_tokens(
                (" hi", -0.5),
            ),
        ),
    )
    # The first update is answered; the second is not yet: the first's include holds.
    wire = encode(
        c, *map(configured, first), final, *map(configured, second), replace(final, utt_id=1)
    )
    completed = [w for w in wire if w["type"].endswith(".completed")]
    assert [w["logprobs"] for w in completed] == [[entry("hi", -0.5)], None]


def test_without_the_include_logprobs_are_null_though_the_tokens_were_scored() -> None:
    c = vad_codec()
    committed = Committed(0, 0, 900, "Hello,", scored_tokens(("Hello", -0.1), (",", -0.7)))
    tokens = scored_tokens((" Hello", -0.1), (",", -0.7), (" you", -0.2))
    wire = encode(c, committed, Final(0, 0, 1200, transcript("Hello, you", tokens)))
    assert [w["type"].rsplit(".", 1)[-1] for w in wire] == ["delta", "delta", "completed"]
    assert [w["logprobs"] for w in wire] == [None, None, None]
    # Dropping the include drops them again.
    c = logprobs_codec()
    announce(c, c.decode(ga_update(include=None)))
    (_, completed) = encode(c, Final(1, 0, 1200, transcript("Hello, you", tokens)))
    assert completed["logprobs"] is None


def test_committed_deltas_carry_their_tokens_and_with_the_last_join_to_completed() -> None:
    c = logprobs_codec()
    one = scored_tokens(("Hello", -0.1), (",", -0.7))  # a first piece: no leading space
    two = scored_tokens((" how", -0.2), (" are", -0.3), (" you", -0.4), ("?", -0.5))
    whole = scored_tokens(
        (" Hello", -0.1),
        (",", -0.7),
        (" how", -0.2),
        (" are", -0.3),
        (" you", -0.4),
        ("?", -0.5),
        (" Fine", -1.25),
        (".", -0.0625),
    )
    wire = encode(
        c,
        Committed(0, 0, 900, "Hello,", one),
        Partial(0, 0, 1300, "Hello, how are", 6),  # its stable prefix went out already
        Committed(0, 900, 1800, " how are you?", two),
        Final(0, 0, 2600, transcript("Hello, how are you? Fine.", whole)),
    )
    deltas = [w for w in wire if w["type"].endswith(".delta")]
    (completed,) = [w for w in wire if w["type"].endswith(".completed")]
    assert [d["delta"] for d in deltas] == ["Hello,", " how are you?", " Fine."]
    assert [[e["token"] for e in d["logprobs"]] for d in deltas] == [
        ["Hello", ","],
        [" how", " are", " you", "?"],
        [" Fine", "."],  # the tokens past what the commits sent
    ]
    for d in deltas:
        assert "".join(e["token"] for e in d["logprobs"]) == d["delta"]
    sent = [e for d in deltas for e in d["logprobs"]]
    assert "".join(e["token"] for e in sent) == completed["transcript"]
    assert sent == completed["logprobs"]
    assert [e["logprob"] for e in sent] == [-0.1, -0.7, -0.2, -0.3, -0.4, -0.5, -1.25, -0.0625]


def test_deltas_of_partials_or_of_no_tokens_carry_no_logprobs() -> None:
    # A commit that brought no tokens has none to give: null, not an empty list.
    c = logprobs_codec()
    (delta,) = encode(c, Committed(5, 0, 900, "Hi,"))
    assert (delta["delta"], delta["logprobs"]) == ("Hi,", None)
    # A partial is never scored: its deltas say null even when the session includes them.
    wire = encode(c, Partial(0, 0, 500, "hello wor", 6), Partial(0, 0, 900, "hello world", 11))
    assert [(w["delta"], w["logprobs"]) for w in wire] == [("hello ", None), ("world", None)]
    # The completing delta carries the final's tokens past what the partials sent.
    tokens = scored_tokens((" hello", -0.5), (" world", -0.25), ("s", -2.0))
    delta, completed = encode(c, Final(0, 0, 1000, transcript("hello worlds", tokens)))
    assert delta["delta"] == "s" and delta["logprobs"] == [entry("s", -2.0)]
    assert [e["token"] for e in completed["logprobs"]] == ["hello", " world", "s"]


def test_failed_cleared_and_ended() -> None:
    c = vad_codec()
    failed, cleared = encode(
        c, Failed(2, 0, 500, "out_of_memory", "utterance 2 could not be decoded"), Cleared(3)
    )
    assert failed["type"] == "conversation.item.input_audio_transcription.failed"
    assert failed["item_id"] == "item_t_2"
    assert failed["error"] == {
        "type": "transcription_error",
        "code": "out_of_memory",
        "message": "utterance 2 could not be decoded",
        "param": None,
    }
    assert cleared["type"] == "input_audio_buffer.cleared"
    assert encode(c, Ended()) == []


def test_every_server_event_has_a_unique_event_id() -> None:
    c = vad_codec()
    wire = encode(
        c,
        SpeechStarted(0, 0),
        Partial(0, 0, 400, "a b", 1),
        SpeechStopped(0, 0, 500, StopCause.VAD),
        Final(0, 0, 500, transcript("a b")),
        Cleared(None),
        ErrorEvent("x", "y"),
    )
    ids = [w["event_id"] for w in wire]
    assert len(set(ids)) == len(ids) and all(ids)


def test_codecs_of_different_connections_have_different_ids() -> None:
    one = OpenAIRealtimeCodec(Handshake(), SessionLimits())
    two = OpenAIRealtimeCodec(Handshake(), SessionLimits())
    first = json.loads(one.encode(Cleared(None))[0])["event_id"]
    assert first != json.loads(two.encode(Cleared(None))[0])["event_id"]


def test_an_empty_commit_error_names_its_commit() -> None:
    c = vad_codec()
    c.decode(msg("input_audio_buffer.commit", event_id="c1"))
    c.decode(msg("input_audio_buffer.commit", event_id="c2"))
    empty = EmptyCommitError("there is no uncommitted audio to commit")
    # The first commit closed an utterance; the second found nothing.
    wire = encode(
        c, SpeechStopped(0, 0, 700, StopCause.COMMIT), ErrorEvent(empty.code, empty.message)
    )
    assert [w["type"] for w in wire] == [
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "error",
    ]
    assert wire[2]["error"] == {
        "type": "invalid_request_error",
        "code": "input_audio_buffer_commit_empty",
        "message": empty.message,
        "param": None,
        "event_id": "c2",
    }


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_text_decodes_or_raises_a_protocol_error(text: str) -> None:
    try:
        codec().decode(text)
    except ProtocolError as exc:
        assert exc.code


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
KEYS = ["type", "audio", "format", "turn_detection", "transcription", "language", "rate"]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["session.update", "transcription_session.update"]),
    st.dictionaries(st.sampled_from(KEYS), JSON),
    st.dictionaries(st.sampled_from(KEYS), JSON),
)
def test_any_update_applies_or_raises_a_protocol_error(
    kind: str, session: dict[str, Any], audio_input: dict[str, Any]
) -> None:
    if kind == "session.update":
        session = {**session, "type": "transcription", "audio": {"input": audio_input}}
    try:
        (command,) = codec().decode(msg(kind, session=session))
    except ProtocolError as exc:
        assert exc.code
    else:
        assert isinstance(command, Configure)


# ---- a real Session through the codec -----------------------------------------------------

RATE_24K = 24000


class RealtimeDriver:
    """A Session driven through the OpenAI codec as server.live.connection drives one."""

    def __init__(self, decoder: Callable[[InferenceRequest], Transcript]) -> None:
        config = SessionConfig()
        self.session = Session("s1", config, EnergyVadModel())
        self.codec = codec()
        self.decoder = decoder
        self.now = 0.0
        self.wire: list[Wire] = []
        self.close_code: int | None = None
        self._feed(self.codec.opening)

    def send(self, message: str) -> None:
        self._feed(lambda: self.codec.decode(message))

    def _feed(self, decode: Callable[[], Sequence[Command]]) -> None:
        try:
            for command in decode():
                self.session.handle(command, self.now)
        except ProtocolError as exc:
            if self.codec.is_fatal(exc):
                self.close_code = self.codec.close_code(exc)
                self.session.abort(exc, self.now)
            else:
                self.session.reject(exc)
        self.pump()

    def pump(self) -> None:
        """Answer every request at once, then put the session's events on the wire."""
        for request in self.session.requests_to_submit():
            result = InferenceResult(request.ref, self.decoder(request))
            self.session.receive_result(result, self.now)
        for event in self.session.events_to_send():
            self.wire += [json.loads(frame) for frame in self.codec.encode(event)]

    def stream(self, audio: np.ndarray, append_s: float = 0.1) -> None:
        """Append 24 kHz audio as pcm16 in `append_s` pieces, on a real-time clock."""
        pcm = (np.clip(audio, -1, 32767 / 32768) * 32768).astype("<i2").tobytes()
        step = int(RATE_24K * append_s) * 2
        for i in range(0, len(pcm), step):
            self.send(append(pcm[i : i + step]))
            self.now += append_s

    def of(self, kind: str) -> list[Wire]:
        return [w for w in self.wire if w["type"].endswith(kind)]


def tone_bursts_24k(spans_s: list[tuple[float, float]], total_s: float) -> np.ndarray:
    return tone_bursts(spans_s, total_s, RATE_24K)


def test_server_vad_session_through_the_codec() -> None:
    d = RealtimeDriver(word_transcript)
    d.stream(tone_bursts_24k([(0.5, 2.5), (3.5, 5.0)], 6.0))
    assert d.wire[0]["type"] == "session.created"
    started, stopped = d.of("speech_started"), d.of("speech_stopped")
    committed, completed = d.of("committed"), d.of("completed")
    assert len(started) == len(stopped) == len(committed) == len(completed) == 2
    for i, done in enumerate(completed):
        item = started[i]["item_id"]
        assert stopped[i]["item_id"] == committed[i]["item_id"] == done["item_id"] == item
        deltas = [w for w in d.of("delta") if w["item_id"] == item]
        # Deltas add up to the transcript. Partials promise no text (issue 33), so the text
        # comes as one delta just before `completed`, as whisper-1's does on OpenAI.
        assert "".join(w["delta"] for w in deltas) == done["transcript"] != ""
        order = [w["type"].rsplit(".", 1)[-1] for w in d.wire if w.get("item_id") == item]
        assert order == ["speech_started", "speech_stopped", "committed", "delta", "completed"]
        extras = done["sensevoice"]
        assert extras["start_ms"] == started[i]["audio_start_ms"]
        assert extras["end_ms"] == stopped[i]["audio_end_ms"]
        assert done["transcript"] == " ".join(t["text"].strip() for t in extras["tokens"])
    assert committed[1]["previous_item_id"] == committed[0]["item_id"]
    assert 400 <= started[0]["audio_start_ms"] <= 500 and 2500 <= stopped[0]["audio_end_ms"] <= 2600


def samples_decoded(completed: Wire, utterance: str) -> int:
    """How much 16 kHz audio the fake engine decoded for this final (see fake_transcript)."""
    utt, samples, _digest = completed["transcript"].split()
    assert utt == utterance
    return int(samples.removeprefix("n"))


def test_manual_commits_through_the_codec() -> None:
    d = RealtimeDriver(fake_transcript)
    d.send(ga_update({"turn_detection": None, "transcription": {"language": "en"}}))
    assert d.wire[-1]["type"] == "session.updated"
    d.stream(tone_bursts_24k([(0.2, 0.8)], 1.0))
    d.send(msg("input_audio_buffer.commit", event_id="c1"))
    d.send(msg("input_audio_buffer.commit", event_id="c2"))  # nothing new: an error
    d.stream(tone_bursts_24k([], 0.5))
    d.send(msg("input_audio_buffer.clear", event_id="k1"))
    pcmu = {"type": "transcription", "audio": {"input": {"format": {"type": "audio/pcmu"}}}}
    d.send(msg("session.update", session=pcmu, event_id="u1"))  # too late: an error
    d.stream(tone_bursts_24k([(0.0, 0.6)], 0.6))
    d.send(msg("input_audio_buffer.commit", event_id="c3"))
    kinds = [w["type"] for w in d.wire if not w["type"].endswith(".delta")]
    assert kinds == [
        "session.created",
        "session.updated",
        "input_audio_buffer.committed",
        "conversation.item.input_audio_transcription.completed",
        "error",
        "input_audio_buffer.cleared",
        "error",
        "input_audio_buffer.committed",
        "conversation.item.input_audio_transcription.completed",
    ]
    first, second = d.of("committed")
    assert second["previous_item_id"] == first["item_id"] != second["item_id"]
    one, two = d.of("completed")
    # Each final is the span between commits: 1 s, then 0.6 s (the cleared 0.5 s is gone),
    # give or take the resampler's look-ahead, which reaches the core with the next append.
    lag = 512  # 32 ms
    assert abs(samples_decoded(one, "u0") - 16000) <= lag
    assert abs(samples_decoded(two, "u2") - 9600) <= lag
    assert abs(one["sensevoice"]["end_ms"] - 1000) <= lag // 16
    assert abs(two["sensevoice"]["start_ms"] - 1500) <= lag // 16
    empty, locked = (w["error"] for w in d.of("error"))
    assert (empty["code"], empty["event_id"]) == ("input_audio_buffer_commit_empty", "c2")
    assert (locked["param"], locked["event_id"]) == (f"{INPUT}.format", "u1")
    assert d.close_code is None and not d.session.stopped


def test_a_fatal_error_still_delivers_the_owed_final() -> None:
    d = RealtimeDriver(fake_transcript)
    d.stream(tone_bursts_24k([(0.2, 3.0)], 2.0))
    d.send(msg("input_audio_buffer.append", audio="A" * (MAX_AUDIO_CHARS + 4), event_id="big"))
    assert d.close_code == 1009
    error = d.of("error")[0]["error"]
    assert (error["code"], error["event_id"]) == ("frame_too_large", "big")
    assert d.wire[-1]["type"].endswith("completed")
    assert d.session.finished


def test_a_prompt_that_lists_phrases_adds_hotwords_and_free_text_does_not() -> None:
    c = codec()
    listing = {"keywords": ["SenseVoice"], "prompt": "Acme Corp, SenseVoice, Kowalski"}
    (command,) = c.decode(ga_update({"transcription": listing}))
    assert isinstance(command, Configure)
    assert command.options.hotwords == (
        Hotword("SenseVoice"),
        Hotword("Acme Corp"),
        Hotword("Kowalski"),
    )
    (command,) = c.decode(ga_update({"transcription": {"prompt": "A call about a refund."}}))
    assert isinstance(command, Configure)
    assert command.options.hotwords == (Hotword("SenseVoice"),)  # keywords stay


def scoring_words(asked: list[bool]) -> Callable[[InferenceRequest], Transcript]:
    """The word fake, scoring each word k at -(k + 1) / 100 when a decode asks for it
    (and noting whether each final decode did)."""

    def decode(request: InferenceRequest) -> Transcript:
        said = word_transcript(request)
        if request.kind is RequestKind.PARTIAL:
            assert not request.options.confidence  # partials are never scored
            return said
        asked.append(request.options.confidence)
        if not request.options.confidence:
            return said
        tokens = tuple(replace(t, logprob=-(t.id + 1) / 100) for t in said.tokens)
        return replace(said, tokens=tokens)

    return decode


def test_a_session_that_includes_logprobs_gets_the_engines_through_the_codec() -> None:
    asked: list[bool] = []
    d = RealtimeDriver(scoring_words(asked))
    d.send(ga_update(include=[LOGPROBS]))
    d.stream(tone_bursts_24k([(0.5, 2.5)], 3.5))
    (completed,) = d.of("completed")
    assert asked and all(asked)
    entries = completed["logprobs"]
    assert "".join(e["token"] for e in entries) == completed["transcript"] != ""
    # Word k was scored -(k + 1) / 100: each entry carries its own token's value.
    assert [e["logprob"] for e in entries] == [
        -(int(e["token"].strip().removeprefix("w")) + 1) / 100 for e in entries
    ]
    deltas = [w for w in d.of("delta") if w["item_id"] == completed["item_id"]]
    assert [e for w in deltas for e in w["logprobs"] or ()] == entries
