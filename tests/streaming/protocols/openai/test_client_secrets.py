"""OpenAI's client-secret request read strictly, its answer as the SDK parses it, and what a
secret's pins do to a Realtime session (the codec starts from them and keeps them)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.realtime import ClientSecretCreateResponse

from engine.types import Hotword
from streaming.audio.decoder import AudioFormat
from streaming.commands import Configure
from streaming.events import Configured
from streaming.limits import SessionLimits
from streaming.pins import Pins
from streaming.protocols.base import Handshake
from streaming.protocols.openai.client_secrets import (
    DEFAULT_TTL_S,
    parse_secret_request,
    secret_answer,
)
from streaming.protocols.openai.fields import RealtimeFieldError
from streaming.protocols.openai.realtime import OpenAIRealtimeCodec

CAP = 10
PCMU = {"type": "audio/pcmu"}


def transcription(**audio_input: Any) -> dict[str, Any]:
    return {"type": "transcription", "audio": {"input": audio_input}}


def test_an_empty_request_is_a_transcription_secret_of_the_default_life_pinning_nothing() -> None:
    asked = parse_secret_request({}, CAP)
    assert (asked.ttl_s, asked.max_sessions, asked.pins) == (DEFAULT_TTL_S, CAP, Pins())
    assert asked.session == {"type": "transcription"}


def test_the_format_language_and_keywords_a_session_names_are_pinned() -> None:
    session = transcription(
        format={"type": "audio/pcm", "rate": 16000},
        transcription={"model": "x", "language": "en-US", "keywords": ["hello world"]},
        turn_detection={"type": "server_vad", "silence_duration_ms": 300},
    )
    body = {"expires_after": {"anchor": "created_at", "seconds": 60}, "session": session}
    asked = parse_secret_request({**body, "max_sessions": 2}, CAP)
    assert (asked.ttl_s, asked.max_sessions) == (60, 2)
    assert asked.pins == Pins("en", (Hotword("hello world"),), "pcm_s16le", 16000)
    assert asked.session == session


def test_what_a_session_leaves_out_stays_the_clients() -> None:
    asked = parse_secret_request({"session": transcription(format=PCMU)}, CAP)
    assert asked.pins == Pins(encoding="mulaw", sample_rate=8000)
    prompt = {"prompt": "Acme, SenseStream"}
    asked = parse_secret_request({"session": transcription(transcription=prompt)}, CAP)
    assert asked.pins == Pins(hotwords=(Hotword("Acme"), Hotword("SenseStream")))
    free = {"prompt": "A call about an order. It may be noisy.", "language": None}
    asked = parse_secret_request({"session": transcription(transcription=free)}, CAP)
    assert asked.pins == Pins(language="auto")  # free text is no hotword list
    no_words = {"keywords": []}
    asked = parse_secret_request({"session": transcription(transcription=no_words)}, CAP)
    assert asked.pins == Pins(hotwords=())  # none, whatever the client asks


def test_a_conversation_session_is_taken_for_its_audio_input() -> None:
    session = {
        "type": "realtime",
        "model": "gpt-realtime",
        "instructions": "Be brief.",
        "output_modalities": ["text"],
        "audio": {"input": {"format": PCMU}, "output": {"voice": "marin"}},
    }
    asked = parse_secret_request({"session": session}, CAP)
    assert asked.pins == Pins(encoding="mulaw", sample_rate=8000)
    assert asked.session == session


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ([], "invalid_type", None),
        ({"expires": 5}, "unknown_parameter", "expires"),
        (
            {"expires_after": {"anchor": "now", "seconds": 60}},
            "invalid_value",
            "expires_after.anchor",
        ),
        ({"expires_after": {"seconds": 9}}, "invalid_value", "expires_after.seconds"),
        ({"expires_after": {"seconds": 7201}}, "invalid_value", "expires_after.seconds"),
        ({"expires_after": {"seconds": "60"}}, "invalid_type", "expires_after.seconds"),
        ({"expires_after": {"seconds": 60, "x": 1}}, "unknown_parameter", "expires_after.x"),
        ({"session": {"type": "conversation"}}, "invalid_value", "session.type"),
        ({"session": {"audio": {}}}, "missing_required_parameter", "session.type"),
        ({"session": "transcription"}, "invalid_type", "session"),
        ({"session": {"type": "realtime", "voice": "x"}}, "unknown_parameter", "session.voice"),
        (
            {"session": transcription(transcription={"language": "xx"})},
            "invalid_value",
            "session.audio.input.transcription.language",
        ),
        (
            {"session": transcription(format={"type": "audio/pcmu", "rate": 16000})},
            "invalid_value",
            "session.audio.input.format.rate",
        ),
        ({"max_sessions": 0}, "invalid_value", "max_sessions"),
        ({"max_sessions": CAP + 1}, "invalid_value", "max_sessions"),
        ({"max_sessions": True}, "invalid_type", "max_sessions"),
    ],
)
def test_bad_requests_name_openais_code_and_the_field(
    body: Any, code: str, param: str | None
) -> None:
    with pytest.raises(RealtimeFieldError) as refused:
        parse_secret_request(body, CAP)
    assert (refused.value.openai_code, refused.value.param) == (code, param)


@pytest.mark.parametrize("kind", ["transcription", "realtime"])
def test_the_answer_is_what_the_sdk_parses(kind: str) -> None:
    asked = parse_secret_request({"session": {"type": kind}}, CAP)
    answer = json.loads(json.dumps(secret_answer("ek_x.y", 1234, "sess_t", asked)))
    parsed = ClientSecretCreateResponse.model_validate(answer)
    assert (parsed.value, parsed.expires_at) == ("ek_x.y", 1234)
    assert (parsed.session.type, parsed.session.id) == (kind, "sess_t")


# ---- a Realtime session under a secret's pins -------------------------------------------


PINS = Pins("en", (Hotword("hello world"),), "mulaw", 8000)


def pinned_codec() -> OpenAIRealtimeCodec:
    return OpenAIRealtimeCodec(Handshake(), SessionLimits(), ids="t", pinned=PINS)


def announced(c: OpenAIRealtimeCodec, command: object) -> dict[str, Any]:
    assert isinstance(command, Configure)
    event = Configured("s1", command.audio, command.options, "M", False)
    (frame,) = c.encode(event)
    return dict(json.loads(frame)["session"]["audio"]["input"])


def test_a_pinned_session_starts_from_the_secrets_session() -> None:
    c = pinned_codec()
    (opening,) = c.opening()
    assert isinstance(opening, Configure)
    assert opening.audio == AudioFormat("mulaw", 8000)
    assert opening.options.language == "en"
    assert opening.options.hotwords == (Hotword("hello world"),)
    audio_in = announced(c, opening)
    assert audio_in["format"] == {"type": "audio/pcmu"}
    assert audio_in["transcription"]["language"] == "en"
    assert audio_in["transcription"]["keywords"] == ["hello world"]


def test_an_update_keeps_the_pinned_options_and_may_not_change_the_format() -> None:
    c = pinned_codec()
    announced(c, c.opening()[0])
    asks = {"language": "zh", "keywords": ["other"]}
    (command,) = c.decode(
        json.dumps({"type": "session.update", "session": transcription(transcription=asks)})
    )
    audio_in = announced(c, command)
    assert audio_in["transcription"]["language"] == "en"
    assert audio_in["transcription"]["keywords"] == ["hello world"]
    pcm = {"type": "audio/pcm", "rate": 24000}
    with pytest.raises(RealtimeFieldError) as refused:
        c.decode(json.dumps({"type": "session.update", "session": transcription(format=pcm)}))
    assert refused.value.param == "session.audio.input.format"
    assert "mulaw at 8000 Hz" in refused.value.message
    # The refused update changed nothing: the next one still answers in the pinned format.
    (command,) = c.decode(json.dumps({"type": "session.update", "session": transcription()}))
    assert announced(c, command)["format"] == {"type": "audio/pcmu"}
