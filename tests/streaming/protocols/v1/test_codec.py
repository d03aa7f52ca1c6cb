"""Protocol v1 messages: parsing, validation errors with codes, and event JSON."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.types import DEFAULT_HOTWORD_BOOST, MAX_HOTWORDS, Hotword, Token, Transcript
from streaming.audio.decoder import AudioFormat
from streaming.commands import Audio, Configure, Cut, Stop, StreamOptions
from streaming.errors import (
    FrameTooLargeError,
    InvalidFieldError,
    MalformedMessageError,
    ProtocolError,
    ResumeRefusedError,
    StateError,
    UnknownMessageTypeError,
)
from streaming.events import (
    Acked,
    Cleared,
    Committed,
    Configured,
    Ended,
    ErrorEvent,
    Failed,
    Final,
    Partial,
    Resumed,
    SpeakerTurn,
    SpeechStarted,
    SpeechStopped,
    StopCause,
)
from streaming.limits import MAX_TEXT_BYTES_CEILING, SessionLimits
from streaming.protocols.caps import MAX_REDACT_ITEMS
from streaming.protocols.v1.codec import (
    ResumeRequest,
    StartMessage,
    StopMessage,
    V1Codec,
    dump_event,
    event_to_dict,
    parse_client_text,
)
from streaming.redaction.policies import Policy


def test_start_defaults_and_overrides() -> None:
    assert parse_client_text('{"type":"start"}') == StartMessage()
    msg = parse_client_text(
        '{"type":"start","v":1,"sample_rate":8000,"encoding":"mulaw","channels":1,'
        '"language":"zh","itn":false,"partials":false,"emotion":false,"event":false,'
        '"timestamps":false}'
    )
    assert msg == StartMessage(8000, "mulaw", 1, "zh", False, False, False, False, False)
    assert parse_client_text('{"type":"stop"}') == StopMessage()


def test_hotwords_are_phrases_or_phrases_with_boosts_and_are_echoed() -> None:
    listed = parse_client_text('{"type":"start","hotwords":["Acme Corp","  Zed  "]}')
    assert isinstance(listed, StartMessage)
    assert listed.hotwords == (Hotword("Acme Corp"), Hotword("Zed"))
    boosted = parse_client_text('{"type":"start","hotwords":{"Acme Corp":4,"Zed":1.5}}')
    assert isinstance(boosted, StartMessage)
    assert boosted.hotwords == (Hotword("Acme Corp", 4.0), Hotword("Zed", 1.5))
    command = boosted.to_command()
    assert command.options.hotwords == boosted.hotwords
    ready = json.loads(dump_event(Configured("s1", command.audio, command.options, "m", False)))
    assert ready["config"]["hotwords"] == {"Acme Corp": 4.0, "Zed": 1.5}
    assert listed.to_dict()["hotwords"] == {"Acme Corp": DEFAULT_HOTWORD_BOOST, "Zed": 2.0}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"type":"start","hotwords":"Acme"}', "list of phrases"),
        ('{"type":"start","hotwords":[1,2]}', "list of phrases"),
        ('{"type":"start","hotwords":{"Acme":"high"}}', "list of phrases"),
        ('{"type":"start","hotwords":{"Acme":true}}', "list of phrases"),
        ('{"type":"start","hotwords":{"Acme":11}}', "boost"),
        ('{"type":"start","hotwords":{"Acme":0}}', "boost"),
        ('{"type":"start","hotwords":[""]}', "characters"),
        ('{"type":"start","hotwords":["' + "x" * 65 + '"]}', "characters"),
        (
            '{"type":"start","hotwords":[' + ",".join(f'"w{i}"' for i in range(1001)) + "]}",
            "at most",
        ),
        # Counted as sent, before any item is read: repeats count, and so does a non-string.
        ('{"type":"start","hotwords":[' + '"Acme",' * MAX_HOTWORDS + '"Acme"]}', "at most"),
        ('{"type":"start","hotwords":[' + '"Acme",' * MAX_HOTWORDS + "1]}", "at most"),
        ('{"type":"start","redact":[' + '"pci",' * MAX_REDACT_ITEMS + '"pci"]}', "at most"),
        ('{"type":"start","redact":"' + "pci," * MAX_REDACT_ITEMS + 'pci"}', "at most"),
    ],
)
def test_bad_hotwords_are_invalid_fields(text: str, fragment: str) -> None:
    with pytest.raises(InvalidFieldError, match=fragment):
        parse_client_text(text)


@pytest.mark.parametrize(
    ("text", "error", "fragment"),
    [
        ("{not json", MalformedMessageError, "JSON"),
        ("[1,2]", MalformedMessageError, "object"),
        ('{"type":"pause"}', UnknownMessageTypeError, "pause"),
        ('{"kind":"start"}', UnknownMessageTypeError, "type"),
        ('{"type":"start","sample_rate":12345}', InvalidFieldError, "sample_rate"),
        ('{"type":"start","sample_rate":"16000"}', InvalidFieldError, "sample_rate"),
        ('{"type":"start","sample_rate":true}', InvalidFieldError, "sample_rate"),
        ('{"type":"start","encoding":"mp3"}', InvalidFieldError, "encoding"),
        ('{"type":"start","channels":3}', InvalidFieldError, "channels"),
        ('{"type":"start","language":"fr"}', InvalidFieldError, "language"),
        ('{"type":"start","itn":1}', InvalidFieldError, "itn"),
        ('{"type":"start","volume":3}', InvalidFieldError, "volume"),
        ('{"type":"stop","now":true}', InvalidFieldError, "now"),
        ('{"type":"start","v":2}', InvalidFieldError, "version"),
    ],
)
def test_bad_messages_raise_typed_errors(text: str, error: type, fragment: str) -> None:
    with pytest.raises(error) as info:
        parse_client_text(text)
    assert fragment in info.value.message
    assert info.value.code and 1000 <= info.value.close_code <= 4999


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_text_parses_or_raises_a_protocol_error(text: str) -> None:
    try:
        parse_client_text(text)
    except ProtocolError as exc:
        assert exc.code


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["type", "v", "sample_rate", "encoding", "channels", "language", "itn"]),
        st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    )
)
def test_any_json_object_parses_or_raises_a_protocol_error(obj: dict) -> None:
    try:
        parse_client_text(json.dumps(obj))
    except ProtocolError as exc:
        assert exc.code


def test_events_carry_version_and_type() -> None:
    transcript = Transcript(
        "hi there",
        "en",
        "happy",
        "speech",
        True,
        "hi there😊",
        (Token(5, " hi", 0, 120), Token(6, " there", 120, 300)),
    )
    events = [
        Configured("s1", AudioFormat(), StreamOptions(), "SenseVoiceSmall", False),
        SpeechStarted(0, 1200),
        Partial(0, 1200, 1800, "hi", 0, {"lang": "en"}),
        Final(0, 1200, 1600, transcript, {"emotion": True, "event": True, "timestamps": True}),
        ErrorEvent("invalid_audio", "NaN"),
        Ended(),
    ]
    wire = [json.loads(dump_event(e)) for e in events]
    assert [w["type"] for w in wire] == [
        "ready",
        "speech_started",
        "partial",
        "final",
        "error",
        "end",
    ]
    assert all(w["v"] == 1 for w in wire)
    final = wire[3]
    # Token times move onto the stream clock.
    assert final["tokens"] == [
        {"text": " hi", "start_ms": 1200, "end_ms": 1320},
        {"text": " there", "start_ms": 1320, "end_ms": 1500},
    ]
    assert final["emotion"] == "happy" and final["rich_text"] == "hi there😊"
    # The effective config names the stream: by default, by its session id.
    assert wire[0]["config"] == StartMessage(stream_id="s1").to_dict()


def codec(**limits: int) -> V1Codec:
    return V1Codec(SessionLimits(**limits))  # type: ignore[arg-type]


def test_codec_turns_messages_into_commands() -> None:
    c = codec()
    start = '{"type":"start","sample_rate":8000,"encoding":"mulaw","language":"en","pace":"replay"}'
    (configure,) = c.decode(start)
    assert configure == Configure(
        AudioFormat("mulaw", 8000, 1), StreamOptions(language="en", pace="replay")
    )
    assert c.decode(b"\x01\x02") == (Audio(b"\x01\x02"),)
    assert c.decode('{"type":"stop"}') == (Stop(),)


def test_codec_allows_start_only_once_and_only_before_audio() -> None:
    c = codec()
    c.decode('{"type":"start"}')
    with pytest.raises(StateError):
        c.decode('{"type":"start"}')
    late = codec()
    late.decode(b"\x00\x00")
    with pytest.raises(StateError):
        late.decode('{"type":"start"}')


def test_lists_up_to_their_caps_are_taken() -> None:
    start = {"type": "start", "hotwords": [f"w{i}" for i in range(MAX_HOTWORDS)]}
    parsed = parse_client_text(json.dumps(start | {"redact": ["pci"] * MAX_REDACT_ITEMS}))
    assert isinstance(parsed, StartMessage) and len(parsed.hotwords) == MAX_HOTWORDS
    assert parsed.redact == frozenset({Policy.PCI})


def test_codec_owns_the_frame_limits_and_close_codes() -> None:
    c = codec(max_frame_bytes=2048, max_text_bytes=256)
    with pytest.raises(FrameTooLargeError) as big_audio:
        c.decode(b"\x00" * 2049)
    with pytest.raises(FrameTooLargeError):
        c.decode('{"type":"start"}' + " " * 300)
    # Multi-byte characters count as bytes, not characters.
    with pytest.raises(FrameTooLargeError):
        c.decode('{"type":"start","x":"' + "é" * 130 + '"}')
    assert c.close_code(big_audio.value) == 1009 and c.is_fatal(big_audio.value)
    assert c.max_message_bytes == 4 * 2048


def test_the_text_frame_limit_may_not_be_raised_past_a_mebibyte() -> None:
    # Past it, one start message (fatal, but a client may reconnect) costs the event loop
    # tens of milliseconds to parse and refuse, with its lists capped or not.
    assert codec(max_text_bytes=MAX_TEXT_BYTES_CEILING).max_message_bytes == 4 << 20
    with pytest.raises(ValueError, match="max_text_bytes"):
        SessionLimits(max_text_bytes=MAX_TEXT_BYTES_CEILING + 1)


def test_codec_stays_silent_on_events_v1_has_no_message_for() -> None:
    c = codec()
    assert c.encode(SpeechStopped(0, 0, 100, StopCause.VAD)) == ()
    assert c.encode(Cleared(0)) == ()
    (failed,) = c.encode(Failed(3, 0, 100, "backend_error", "boom"))
    assert json.loads(failed) == {
        "v": 1,
        "type": "error",
        "code": "backend_error",
        "message": "boom",
    }


def test_a_stream_chooses_its_commit_mode_and_end_silence_and_may_finalize() -> None:
    c = codec()
    (configure,) = c.decode('{"type":"start","commit":"pauses","end_silence_ms":800}')
    assert isinstance(configure, Configure)
    assert configure.options.commit == "pauses"
    assert configure.options.turns.end_silence_ms == 800
    assert c.decode('{"type":"finalize"}') == (Cut(),)
    with pytest.raises(InvalidFieldError, match=r"start\.commit must be one of pauses, off"):
        codec().decode('{"type":"start","commit":"always"}')
    with pytest.raises(InvalidFieldError, match="silence"):
        codec().decode('{"type":"start","end_silence_ms":20}')


def test_committed_text_is_its_own_event() -> None:
    wire = json.loads(dump_event(Committed(3, 1200, 2100, " how are you?")))
    assert wire == {
        "v": 1,
        "type": "committed",
        "utt_id": 3,
        "start_ms": 1200,
        "end_ms": 2100,
        "text": " how are you?",
    }


def test_diarize_and_max_speakers_are_stream_options() -> None:
    msg = parse_client_text('{"type":"start","diarize":true,"max_speakers":3}')
    assert isinstance(msg, StartMessage)
    options = msg.to_command().options
    assert options.diarize is True and options.max_speakers == 3
    assert msg.to_dict()["diarize"] is True
    plain = parse_client_text('{"type":"start"}')
    assert isinstance(plain, StartMessage) and plain.to_command().options.diarize is None
    both = parse_client_text('{"type":"start","diarize":true,"min_speakers":2,"max_speakers":3}')
    assert isinstance(both, StartMessage) and both.to_command().options.min_speakers == 2
    bad_ones = (
        '"max_speakers":0',
        '"max_speakers":33',
        '"max_speakers":"2"',
        '"diarize":1',
        '"min_speakers":0',
        '"min_speakers":4,"max_speakers":3',
    )
    for bad in bad_ones:
        with pytest.raises(InvalidFieldError):
            parse_client_text('{"type":"start",' + bad + "}")


def test_a_final_names_its_speaker_and_where_it_changes_each_token_s() -> None:
    tokens = (Token(1, " Hello", 0, 400), Token(2, " there", 900, 1300))
    transcript = Transcript("Hello there", "en", "neutral", "speech", True, "Hello there", tokens)
    show = {"emotion": True, "event": True, "timestamps": True}
    one = Final(
        0,
        1000,
        2400,
        transcript,
        show,
        speaker="S1",
        speaker_turns=(SpeakerTurn("S1", 1000, 2400),),
    )
    out = event_to_dict(one)
    assert out is not None and out["speaker"] == "S1"
    assert "speakers" not in out and all("speaker" not in t for t in out["tokens"])
    turns = (SpeakerTurn("S1", 1000, 1600), SpeakerTurn("S2", 1800, 2400))
    two = Final(0, 1000, 2400, transcript, show, speaker="S2", speaker_turns=turns)
    out = event_to_dict(two)
    assert out is not None and out["speaker"] == "S2"
    assert out["speakers"] == [
        {"speaker": "S1", "start_ms": 1000, "end_ms": 1600},
        {"speaker": "S2", "start_ms": 1800, "end_ms": 2400},
    ]
    assert [t["speaker"] for t in out["tokens"]] == ["S1", "S2"]
    assert [w["speaker"] for w in out["words"]] == ["S1", "S2"]
    unlabelled = event_to_dict(Final(0, 1000, 2400, transcript, show))
    assert unlabelled is not None and "speaker" not in unlabelled


def test_a_scored_final_gives_its_tokens_words_and_itself_a_confidence() -> None:
    tokens = (
        Token(1, " Hel", 0, 200, logprob=math.log(0.9)),
        Token(2, "lo", 200, 400, logprob=math.log(0.6)),
        Token(3, " there", 900, 1300, logprob=math.log(0.8)),
    )
    transcript = Transcript("Hello there", "en", "neutral", "speech", True, "Hello there", tokens)
    show = {"emotion": True, "event": True, "timestamps": True}
    out = event_to_dict(Final(0, 1000, 2400, transcript, show))
    assert out is not None
    assert [t["confidence"] for t in out["tokens"]] == [0.9, 0.6, 0.8]
    # A word is as sure as its least sure token; the final, its words' mean.
    assert out["words"] == [
        {"text": "Hello", "start_ms": 1000, "end_ms": 1400, "confidence": 0.6},
        {"text": "there", "start_ms": 1900, "end_ms": 2300, "confidence": 0.8},
    ]
    assert out["confidence"] == 0.7
    unscored = replace(transcript, tokens=tuple(replace(t, logprob=None) for t in tokens))
    plain = event_to_dict(Final(0, 1000, 2400, unscored, show))
    assert plain is not None and "confidence" not in plain
    assert all("confidence" not in unit for unit in (*plain["tokens"], *plain["words"]))
    hidden = event_to_dict(Final(0, 1000, 2400, transcript, {"timestamps": False}))
    assert hidden is not None and "words" not in hidden and hidden["confidence"] == 0.7


def test_confidence_is_a_stream_option() -> None:
    msg = parse_client_text('{"type":"start","confidence":false}')
    assert isinstance(msg, StartMessage) and msg.to_command().options.confidence is False
    plain = parse_client_text('{"type":"start"}')
    assert isinstance(plain, StartMessage) and plain.to_command().options.confidence is None
    with pytest.raises(InvalidFieldError, match="confidence"):
        parse_client_text('{"type":"start","confidence":1}')


def test_a_resuming_start_names_its_token_position_and_last_final_and_nothing_else() -> None:
    msg = parse_client_text(
        '{"type":"start","resume":{"token":"rs_a.b","samples":16000,"last_utt_id":3}}'
    )
    assert isinstance(msg, StartMessage) and msg.resume == ResumeRequest("rs_a.b", 16000, 3)
    plain = parse_client_text('{"type":"start","resume":{"token":"rs_a.b","samples":0}}')
    assert isinstance(plain, StartMessage) and plain.resume == ResumeRequest("rs_a.b", 0, None)
    for bad in (
        '"resume":{"token":"t","samples":-1}',
        '"resume":{"token":"t","samples":true}',
        '"resume":{"token":"","samples":0}',
        '"resume":{"token":"t","samples":0,"last_utt_id":-2}',
        '"resume":{"token":"t","samples":0,"at":1}',
        '"resume":"rs_a.b"',
        '"resume":{"token":"t","samples":0},"language":"en"',
    ):
        with pytest.raises(InvalidFieldError):
            parse_client_text('{"type":"start",' + bad + "}")


def test_a_codec_refuses_a_resume_the_server_did_not_take_and_counts_the_audio() -> None:
    c = codec()
    with pytest.raises(ResumeRefusedError, match="does not resume"):
        c.decode('{"type":"start","resume":{"token":"rs_a.b","samples":0}}')
    c = codec()
    c.decode(b"\0" * 3200)
    c.decode(b"\0" * 3201)
    assert c.audio_bytes == 6401 and c.samples_taken == 3200


def test_ready_carries_the_resume_token_for_the_client_alone_and_acks_are_v1_events() -> None:
    c = codec()
    c.resume_token_for = lambda stream_id: f"rs_{stream_id}"
    configured = Configured("s1", AudioFormat(), StreamOptions(), "m", False, stream_id="call")
    (ready,) = c.encode(configured)
    assert json.loads(ready)["resume_token"] == "rs_call"
    assert "resume_token" not in json.loads(dump_event(configured))  # what followers get
    assert json.loads(dump_event(Acked(48000))) == {"v": 1, "type": "ack", "samples": 48000}
    resumed = json.loads(dump_event(Resumed(48000, "rs_next", True)))
    assert resumed == {
        "v": 1,
        "type": "resumed",
        "samples": 48000,
        "resume_token": "rs_next",
        "stopped": True,
    }


def test_a_multichannel_resume_names_each_channels_last_final() -> None:
    msg = parse_client_text(
        '{"type":"start","resume":{"token":"t","samples":8,"last_utt_ids":[2,null]}}'
    )
    assert isinstance(msg, StartMessage) and msg.resume is not None
    assert msg.resume.last_utt_ids == (2, None)
    for bad in ('"last_utt_ids":[]', '"last_utt_ids":[-1]', '"last_utt_ids":{"0":1}'):
        with pytest.raises(InvalidFieldError, match="last_utt_ids"):
            parse_client_text('{"type":"start","resume":{"token":"t","samples":0,' + bad + "}}")
