"""The FunASR runtime protocol codec: every message and error path, then a real Session."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.types import (
    DEFAULT_HOTWORD_BOOST,
    MAX_HOTWORD_BOOST,
    MAX_HOTWORDS,
    Hotword,
    InferenceRequest,
    InferenceResult,
    Token,
    Transcript,
)
from streaming.audio.decoder import AudioFormat
from streaming.commands import Audio, Command, Configure, Stop, StreamOptions
from streaming.errors import (
    FrameTooLargeError,
    InvalidAudioError,
    InvalidFieldError,
    MalformedMessageError,
    ProtocolError,
    StateError,
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
from streaming.protocols.funasr.codec import MAX_TEXT_BYTES, FunasrCodec, common_prefix
from streaming.protocols.funasr.config import parse_client_text, parse_hotwords
from streaming.protocols.funasr.stamps import split_sentences, stamp_fields
from streaming.segmenter import SegmenterConfig
from streaming.session import Session, SessionConfig
from tests.speech import chunks, to_s16le
from tests.streaming.fakes import (
    EnergyVadModel,
    V1Session,
    fake_transcript,
    tone_bursts,
    word_transcript,
)

SHOW_ALL = {"emotion": True, "event": True, "timestamps": True}
Transcribe = Callable[[InferenceRequest], Transcript]


def codec(**limits: int) -> FunasrCodec:
    return FunasrCodec(SessionLimits(**limits))  # type: ignore[arg-type]


def config(**fields: Any) -> str:
    return json.dumps(fields)


def replay(**options: Any) -> StreamOptions:
    """The options a FunASR stream gets: always a replay (clients send files unpaced)."""
    return StreamOptions(pace="replay", **options)


def wav_header(
    rate: int = 16000,
    channels: int = 1,
    bits: int = 16,
    tag: int = 1,
    data_size: int = 0xFFFFFFFF,
    before_data: bytes = b"",
    extensible: bool = False,
) -> bytes:
    """A RIFF/WAVE header up to the start of the data chunk's samples."""
    align = channels * bits // 8
    fmt = struct.pack(
        "<HHIIHH", 0xFFFE if extensible else tag, channels, rate, rate * align, align, bits
    )
    if extensible:
        fmt += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", tag) + bytes(14)
    chunks_ = b"fmt " + struct.pack("<I", len(fmt)) + fmt + before_data
    chunks_ += b"data" + struct.pack("<I", data_size)
    return b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE" + chunks_


def audio_of(commands: list[Command] | tuple[Command, ...]) -> bytes:
    return b"".join(c.data for c in commands if isinstance(c, Audio))


def parsed(frames: Any) -> list[dict[str, Any]]:
    return [json.loads(f) for f in frames]


# ---- client text --------------------------------------------------------------------


def test_first_config_configures_a_replay_with_the_2pass_defaults() -> None:
    c = codec()
    first = config(mode="2pass", chunk_size=[5, 10, 5], wav_name="demo", is_speaking=True)
    assert c.decode(first) == [Configure(AudioFormat(), replay())]


def test_config_fields_map_to_stream_options() -> None:
    c = codec()
    message = config(
        mode="offline",
        audio_fs=8000,
        wav_format="PCM",
        svs_lang="ZH",
        svs_itn=False,
        itn=True,  # Paraformer's switch: accepted, but SenseVoice reads svs_itn
        hotwords='{"阿里巴巴": 20, "通义实验室": 30}',
        chunk_size="5,10,5",
        chunk_interval=10,
        encoder_chunk_look_back=4,
        decoder_chunk_look_back=0,
    )
    hotwords = (Hotword("阿里巴巴", 2.0), Hotword("通义实验室", 3.0))  # FunASR's weight / 10
    options = replay(language="zh", itn=False, partials=False, hotwords=hotwords)
    assert c.decode(message) == [Configure(AudioFormat("pcm_s16le", 8000, 1), options)]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ('{"阿里巴巴": 20}', ("阿里巴巴",)),
        ("阿里巴巴 通义实验室", ("阿里巴巴", "通义实验室")),
        ("hello, world,hello", ("hello", "world")),
        ({"SenseStream": 10, "FunASR": 5}, ("SenseStream", "FunASR")),
        ("", ()),
        ("{}", ()),
    ],
)
def test_hotwords_take_every_form_clients_send(value: Any, words: tuple[str, ...]) -> None:
    assert tuple(h.phrase for h in parse_hotwords(value)) == words


def test_hotword_weights_become_boosts_within_range() -> None:
    parsed = parse_hotwords('{"SenseStream": 20, "FunASR": 500, "zero": 0, "plain": 7.5}')
    assert [(h.phrase, h.boost) for h in parsed] == [
        ("SenseStream", 2.0),
        ("FunASR", MAX_HOTWORD_BOOST),  # clamped, not refused: FunASR's weights are loose
        ("zero", 0.1),
        ("plain", 0.75),
    ]
    assert {h.boost for h in parse_hotwords("a b")} == {DEFAULT_HOTWORD_BOOST}
    with pytest.raises(InvalidFieldError, match="weight"):
        parse_hotwords('{"a": "high"}')
    with pytest.raises(InvalidFieldError, match="at most"):
        parse_hotwords(" ".join(f"w{i}" for i in range(MAX_HOTWORDS + 1)))
    # Counted as sent, before a hotword is made: repeats count too.
    with pytest.raises(InvalidFieldError, match="at most"):
        parse_hotwords("Acme " * (MAX_HOTWORDS + 1))
    with pytest.raises(InvalidFieldError, match="at most"):
        parse_hotwords({f"w{i}": "not a weight" for i in range(MAX_HOTWORDS + 1)})
    assert len(parse_hotwords("Acme " * MAX_HOTWORDS)) == 1
    with pytest.raises(InvalidFieldError, match="characters"):
        parse_hotwords("x" * 65)


def test_unknown_keys_are_ignored_and_null_means_absent() -> None:
    text = parse_client_text(config(svs_lang=None, speaker="x", is_speaking=True))
    assert text.changes == {} and not text.end


@pytest.mark.parametrize(
    ("text", "error", "fragment"),
    [
        ("{not json", MalformedMessageError, "JSON"),
        ("[1, 2]", MalformedMessageError, "object"),
        (config(mode="streaming"), InvalidFieldError, "mode"),
        (config(audio_fs=12345), InvalidFieldError, "audio_fs"),
        (config(audio_fs="16000"), InvalidFieldError, "audio_fs"),
        (config(audio_fs=True), InvalidFieldError, "audio_fs"),
        (config(wav_format="mp3"), InvalidFieldError, "pcm"),
        (config(svs_lang="fr"), InvalidFieldError, "svs_lang"),
        (config(svs_itn="yes"), InvalidFieldError, "svs_itn"),
        (config(itn=1), InvalidFieldError, "itn"),
        (config(hotwords=20), InvalidFieldError, "hotwords"),
        (config(chunk_size=[5, 10]), InvalidFieldError, "chunk_size"),
        (config(chunk_size="a,b,c"), InvalidFieldError, "chunk_size"),
        (config(chunk_size=[5, True, 5]), InvalidFieldError, "chunk_size"),
        (config(chunk_size=[5, -1, 5]), InvalidFieldError, "chunk_size"),
        (config(chunk_interval="10"), InvalidFieldError, "chunk_interval"),
        (config(encoder_chunk_look_back=4.5), InvalidFieldError, "encoder_chunk_look_back"),
        (config(wav_name=7), InvalidFieldError, "wav_name"),
        (config(is_speaking="false"), InvalidFieldError, "is_speaking"),
        (config(is_finished=1), InvalidFieldError, "is_finished"),
    ],
)
def test_bad_config_raises_typed_errors(text: str, error: type, fragment: str) -> None:
    with pytest.raises(error) as info:
        codec().decode(text)
    assert fragment in info.value.message
    assert 1000 <= info.value.close_code <= 4999


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            ["mode", "audio_fs", "wav_format", "svs_lang", "hotwords", "chunk_size", "is_speaking"]
        ),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(),
            st.floats(allow_nan=False),
            st.text(max_size=8),
            st.lists(st.integers(), max_size=4),
        ),
    )
)
def test_any_config_object_decodes_or_raises_a_protocol_error(obj: dict[str, Any]) -> None:
    try:
        codec().decode(json.dumps(obj))
    except ProtocolError as exc:
        assert exc.code


def test_end_markers_stop_the_stream_and_may_carry_config() -> None:
    assert codec().decode(config(is_speaking=False)) == [Configure(AudioFormat(), replay()), Stop()]
    c = codec()
    c.decode(config(mode="2pass"))
    assert c.decode(config(is_finished=True)) == [Stop()]
    html5 = codec()
    html5.decode(config(mode="2pass"))
    # The html5 client's stop message repeats config keys; a changed option is applied first.
    stop = config(chunk_size=[5, 10, 5], wav_name="h5", is_speaking=False, mode="offline")
    assert html5.decode(stop) == [Configure(AudioFormat(), replay(partials=False)), Stop()]


def test_config_may_repeat_and_change_options_but_not_the_format_after_audio() -> None:
    c = codec()
    c.decode(config(mode="2pass", audio_fs=8000))
    assert c.decode(config(mode="2pass", audio_fs=8000, is_speaking=True)) == []
    assert c.decode(b"\x01\x00") == [Audio(b"\x01\x00")]
    changed = c.decode(config(svs_lang="en", audio_fs=8000))
    assert changed == [Configure(AudioFormat("pcm_s16le", 8000, 1), replay(language="en"))]
    with pytest.raises(StateError, match="audio_fs"):
        c.decode(config(audio_fs=16000))
    with pytest.raises(StateError, match="wav_format"):
        c.decode(config(wav_format="wav"))


def test_audio_before_any_config_streams_with_the_defaults() -> None:
    c = codec()
    assert c.decode(b"\x01\x00\x02\x00") == [
        Configure(AudioFormat(), replay()),
        Audio(b"\x01\x00\x02\x00"),
    ]


def test_one_stream_per_connection() -> None:
    c = codec()
    c.decode(config(mode="offline"))
    c.decode(b"\x00\x00")
    assert c.decode(config(is_speaking=False)) == [Stop()]
    # funasr-client sends its end marker again when it closes; the html5 client's carries keys.
    assert c.decode(config(is_speaking=False)) == []
    assert c.decode(config(is_speaking=False, wav_name="h5", mode="2pass")) == []
    with pytest.raises(StateError, match="one stream per connection"):
        c.decode(config(mode="offline", is_speaking=True))
    with pytest.raises(StateError, match="one stream per connection"):
        c.decode(b"\x00\x00")


def test_frame_limits_close_codes_and_fatality() -> None:
    c = codec(max_frame_bytes=2048)
    with pytest.raises(FrameTooLargeError) as big_audio:
        c.decode(b"\x00" * 2050)
    # Long hotword lists fit: text frames may be 64 KiB, counted in bytes.
    words = " ".join(f"热词热词热词热词热词{i}" for i in range(MAX_HOTWORDS))
    assert 32 * 1024 < len(config(hotwords=words).encode()) < MAX_TEXT_BYTES
    (configure,) = c.decode(config(hotwords=words))
    assert isinstance(configure, Configure) and len(configure.options.hotwords) == MAX_HOTWORDS
    with pytest.raises(FrameTooLargeError):
        c.decode(config(hotwords="热" * (MAX_TEXT_BYTES // 3 + 1)))
    assert c.close_code(big_audio.value) == 1009 and c.is_fatal(big_audio.value)
    assert c.is_fatal(InvalidFieldError("x")) and c.close_code(InvalidFieldError("x")) == 1008
    assert c.max_message_bytes == 4 * MAX_TEXT_BYTES
    assert codec(max_frame_bytes=1 << 20).max_message_bytes == 4 << 20
    assert c.opening() == () and c.end_grace_s > 0


# ---- WAV audio ----------------------------------------------------------------------


def test_a_wav_file_sent_as_pcm_has_its_header_stripped_and_read() -> None:
    body = bytes(range(200))
    c = codec()
    c.decode(config(wav_format="PCM", audio_fs=16000))
    commands = c.decode(wav_header(44100, 2) + body)
    assert commands == [Configure(AudioFormat("pcm_s16le", 44100, 2), replay()), Audio(body)]


@pytest.mark.parametrize("piece", [1, 5, 13, 64])
def test_a_header_split_over_frames_gives_the_same_audio(piece: int) -> None:
    header = wav_header(8000, before_data=b"LIST" + struct.pack("<I", 5) + b"abcde\x00")
    body = bytes(range(256)) * 3
    c = codec()
    c.decode(config(wav_format="wav"))
    commands: list[Command] = []
    for part in chunks(header + body, piece):
        commands += c.decode(part)
    commands += c.decode(config(is_speaking=False))
    assert audio_of(commands) == body
    configures = [x for x in commands if isinstance(x, Configure)]
    assert configures[-1].audio == AudioFormat("pcm_s16le", 8000, 1)
    assert commands[-1] == Stop()


def test_the_data_chunk_size_drops_trailing_metadata() -> None:
    body = b"\x01\x00" * 50
    trailer = b"LIST" + struct.pack("<I", 4) + b"info"
    c = codec()
    commands = c.decode(wav_header(data_size=len(body)) + body[:40])
    commands += c.decode(body[40:] + trailer)
    assert audio_of(commands) == body


def test_an_extensible_pcm_header_is_read() -> None:
    c = codec()
    (configure, audio) = c.decode(wav_header(48000, 2, extensible=True) + b"\x00\x00\x00\x00")
    assert configure == Configure(AudioFormat("pcm_s16le", 48000, 2), replay())
    assert audio == Audio(b"\x00\x00\x00\x00")


@pytest.mark.parametrize(
    ("header", "fragment"),
    [
        (wav_header(bits=8), "16-bit"),
        (wav_header(bits=32, tag=3), "16-bit"),
        (wav_header(bits=32, tag=3, extensible=True), "16-bit"),
        (wav_header(channels=3), "mono or stereo"),
        (wav_header(rate=12345), "sample rate"),
    ],
)
def test_unsupported_wav_audio_is_refused(header: bytes, fragment: str) -> None:
    with pytest.raises(InvalidAudioError, match=fragment):
        codec().decode(header + b"\x00" * 8)


def test_wav_format_requires_a_header_and_a_whole_one() -> None:
    c = codec()
    c.decode(config(wav_format="wav"))
    with pytest.raises(InvalidAudioError, match="RIFF"):
        c.decode(b"\x00" * 64)
    cut = codec()
    cut.decode(wav_header()[:30])
    with pytest.raises(InvalidAudioError, match="header"):
        cut.decode(config(is_speaking=False))
    no_fmt = codec()
    with pytest.raises(InvalidAudioError, match="fmt"):
        no_fmt.decode(b"RIFF\x00\x00\x00\x00WAVEdata\x00\x00\x00\x00")


def test_raw_pcm_is_never_mistaken_for_a_header() -> None:
    c = codec()
    assert audio_of(c.decode(b"\x00\x01\x02\x03")) == b"\x00\x01\x02\x03"
    # Bytes that could still begin "RIFF" are held until they decide, and flushed at the end.
    short = codec()
    assert audio_of(short.decode(b"RI")) == b""
    assert audio_of(short.decode(config(is_speaking=False))) == b"RI"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120), st.integers(1, 40), st.booleans())
def test_any_bytes_after_a_riff_tag_decode_or_raise_a_protocol_error(
    tail: bytes, piece: int, required: bool
) -> None:
    c = codec()
    if required:
        c.decode(config(wav_format="wav"))
    try:
        for part in chunks(b"RIFF\x00\x00\x00\x00WAVE" + tail, piece):
            c.decode(part)
        c.decode(config(is_speaking=False))
    except ProtocolError as exc:
        assert exc.code == "invalid_audio"


# ---- server messages ----------------------------------------------------------------

SENTENCE = Transcript(
    "Hello there, friend.",
    "en",
    "happy",
    "speech",
    True,
    "Hello there, friend.😊",
    (
        Token(1, " Hello", 0, 300),
        Token(2, " there", 300, 600),
        Token(3, ",", 600, 660),
        Token(4, " fri", 700, 850),
        Token(5, "end", 850, 1000),
        Token(6, ".", 1000, 1060),
    ),
)


def final(utt_id: int = 0, transcript: Transcript = SENTENCE, start_ms: int = 2000) -> Final:
    return Final(utt_id, start_ms, start_ms + 1200, transcript, SHOW_ALL)


def test_events_without_a_funasr_message_are_silent() -> None:
    c = codec()
    silent: list[SessionEvent] = [
        Configured("s1", AudioFormat(), StreamOptions(), "SenseVoiceSmall", False),
        SpeechStarted(0, 100),
        SpeechStopped(0, 100, 900, StopCause.VAD),
        Cleared(0),
    ]
    assert [c.encode(e) for e in silent] == [(), (), (), ()]


def test_a_final_is_one_2pass_offline_result_with_timestamps_and_tags() -> None:
    c = codec()
    c.decode(config(mode="2pass", wav_name="demo"))
    (message,) = parsed(c.encode(final()))
    ts = [[2000, 2300], [2300, 2600], [2700, 3000]]
    assert message == {
        "mode": "2pass-offline",
        "text": "Hello there, friend.",
        "wav_name": "demo",
        "is_final": False,
        "start_ms": 2000,
        "end_ms": 3200,
        "lang": "en",
        "emotion": "happy",
        "event": "speech",
        "timestamp": "[[2000,2300],[2300,2600],[2700,3000]]",
        "stamp_sents": [
            {"text_seg": "Hello there", "punc": ",", "start": 2000, "end": 2600, "ts_list": ts[:2]},
            {"text_seg": "friend", "punc": ".", "start": 2700, "end": 3000, "ts_list": ts[2:]},
        ],
    }
    # funasr-client json.loads the timestamp string.
    assert json.loads(message["timestamp"]) == ts


def test_hidden_tags_and_tokenless_finals_leave_their_fields_out() -> None:
    c = codec()
    hidden = Final(0, 0, 500, SENTENCE, {"emotion": False, "event": False, "timestamps": False})
    (message,) = parsed(c.encode(hidden))
    assert "emotion" not in message and "event" not in message and "timestamp" not in message
    empty = Transcript("", "unknown", "unknown", "unknown", True, "")
    (message,) = parsed(c.encode(final(transcript=empty)))
    assert message["text"] == "" and "timestamp" not in message and "stamp_sents" not in message
    assert message["wav_name"] == "wav-default-id"


def partial(text: str, stable: int, utt_id: int = 0) -> Partial:
    return Partial(utt_id, 0, 1000, text, stable, {"lang": "en"})


def online_texts(c: FunasrCodec, events: list[SessionEvent]) -> list[str]:
    messages = [m for e in events for m in parsed(c.encode(e))]
    assert all(m["mode"] == "2pass-online" and m["is_final"] is False for m in messages)
    return [m["text"] for m in messages]


def test_2pass_online_sends_only_new_settled_text() -> None:
    c = codec()
    events: list[SessionEvent] = [
        partial("hel", 0),
        partial("hello wor", 3),  # "hel" settles
        partial("hello world", 9),  # "hello wor" settles: only "lo wor" is new
        partial("hello world", 11),
        partial("hello world", 11),  # nothing new: nothing sent
        partial("hello word", 9),  # a revision inside sent text cannot be taken back
        partial("hello words", 10),
    ]
    assert online_texts(c, events) == ["hel", "lo wor", "ld"]


def test_online_text_is_per_utterance_and_survives_dropped_partials() -> None:
    c = codec()
    # The outbox may replace unsent partials: growth is measured against what was sent.
    events: list[SessionEvent] = [
        partial("one two", 0, 0),
        partial("uno", 0, 1),
        partial("one two three", 0, 0),  # agrees with "one two" on its whole length
        partial("uno dos", 0, 1),
        partial("one two three four", 0, 0),
    ]
    assert online_texts(c, events) == ["one two", "uno", " three"]


def test_2pass_online_text_is_what_two_partials_agree_on_or_what_is_promised() -> None:
    c = codec()
    c.decode(config(mode="2pass"))
    assert online_texts(c, [partial("Hello there", 0), partial("Hello the", 0)]) == ["Hello the"]
    assert online_texts(c, [partial("Hello there my", 14)]) == ["re my"]


def test_online_mode_sends_only_promised_text() -> None:
    c = codec()
    c.decode(config(mode="online"))
    # Two partials agree, but nothing is promised: an online client would keep it forever.
    assert online_texts(c, [partial("Hello there", 0), partial("Hello there", 0)]) == []
    assert online_texts(c, [partial("Hello there", 6)]) == ["Hello "]


def test_committed_text_goes_out_as_online_text_at_once() -> None:
    c = codec()
    c.decode(config(mode="online"))
    first = online_texts(c, [Committed(0, 0, 900, "Hello"), partial("Hello there", 5)])
    rest = online_texts(c, [final()])
    assert first == ["Hello"] and "".join(first + rest) == SENTENCE.text
    # In 2pass mode provisional text may have gone further: committed text adds only growth.
    c = codec()
    c.decode(config(mode="2pass"))
    assert online_texts(c, [partial("Hello th", 0), partial("Hello there", 0)]) == ["Hello th"]
    assert online_texts(c, [Committed(0, 0, 900, "Hello")]) == []
    assert online_texts(c, [Committed(0, 900, 1800, " there, friend.")]) == ["ere, friend."]
    c = codec()
    c.decode(config(mode="offline"))
    assert c.encode(Committed(0, 0, 900, "Hello")) == ()


def committing(mode: str) -> FunasrCodec:
    """A codec whose session commits text at pauses, as its `Configured` says."""
    c = codec()
    c.decode(config(mode=mode))
    options = StreamOptions(commit="pauses")
    assert c.encode(Configured("s", AudioFormat(), options, "m", True)) == ()
    return c


def test_with_commits_2pass_online_text_is_the_committed_text_alone() -> None:
    c = committing("2pass")
    # Two partials agree on "Hello th", but nothing is committed: nothing goes out, so a
    # commit that disagrees ("Hello there" decoded whole as "Hello, there") is not blocked.
    assert online_texts(c, [partial("Hello th", 0), partial("Hello there", 0)]) == []
    assert online_texts(c, [Committed(0, 0, 900, "Hello,")]) == ["Hello,"]
    assert online_texts(c, [partial("Hello, the", 6), partial("Hello, ther", 6)]) == []
    assert online_texts(c, [Committed(0, 900, 1800, " there.")]) == [" there."]
    said = Transcript("Hello, there.", "en", "neutral", "speech", True, "Hello, there.", ())
    (offline,) = parsed(c.encode(final(transcript=said)))
    assert offline["mode"] == "2pass-offline" and offline["text"] == "Hello, there."


def test_common_prefix_counts_shared_leading_characters() -> None:
    assert common_prefix("hello wor", "hello world") == 9
    assert common_prefix("", "abc") == 0
    assert common_prefix("abc", "abd") == 2


def test_2pass_sends_online_increments_then_the_offline_sentence() -> None:
    c = codec()
    c.decode(config(mode="2pass"))
    frames = [*c.encode(partial("Hello there", 6)), *c.encode(final())]
    messages = parsed(frames)
    assert [m["mode"] for m in messages] == ["2pass-online", "2pass-offline"]
    assert messages[0]["text"] == "Hello " and messages[1]["text"] == SENTENCE.text


def test_offline_mode_sends_no_online_text() -> None:
    c = codec()
    c.decode(config(mode="offline"))
    assert c.encode(partial("Hello there", 11)) == ()
    assert [m["mode"] for m in parsed(c.encode(final()))] == ["2pass-offline"]


def test_online_mode_sends_the_rest_of_the_final_as_online_text() -> None:
    c = codec()
    c.decode(config(mode="online"))
    sent = online_texts(c, [partial("Hello there", 6)])
    rest = online_texts(c, [final()])
    assert "".join(sent + rest) == SENTENCE.text and rest == ["there, friend."]
    # All of it went as partials: nothing more to say.
    assert online_texts(
        c, [partial("ab", 2, 1), final(1, Transcript("ab", "en", "", "", True, ""))]
    ) == ["ab"]
    # After a revision the final's words still all arrive, from where they part ways.
    revised = online_texts(c, [partial("Jello", 5, 2), final(2)])
    assert revised == ["Jello", SENTENCE.text]


def test_errors_failures_and_the_end() -> None:
    c = codec()
    c.decode(config(wav_name="a.wav"))
    error, failed, end = (
        parsed(c.encode(ErrorEvent("invalid_field", "bad audio_fs")))[0],
        parsed(c.encode(Failed(3, 100, 900, "backend_error", "boom")))[0],
        parsed(c.encode(Ended()))[0],
    )
    assert error == {
        "mode": "2pass-offline",
        "text": "",
        "wav_name": "a.wav",
        "is_final": False,
        "error": {"code": "invalid_field", "message": "bad audio_fs"},
    }
    assert failed["error"] == {"code": "backend_error", "message": "boom"}
    assert (failed["start_ms"], failed["end_ms"], failed["is_final"]) == (100, 900, False)
    # The acknowledgement, as upstream's server sends it: the client's mode, `is_end`, and
    # `is_final: false` with every error when something failed.
    assert end == {
        "mode": "2pass",
        "text": "",
        "wav_name": "a.wav",
        "is_final": False,
        "is_end": True,
        "error": "invalid_field: bad audio_fs; backend_error: boom",
    }


@pytest.mark.parametrize("mode", ["offline", "online", "2pass"])
def test_the_end_of_input_is_acknowledged_in_the_clients_mode(mode: str) -> None:
    c = codec()
    c.decode(config(mode=mode, wav_name="a.wav"))
    (end,) = parsed(c.encode(Ended()))
    assert end == {"mode": mode, "text": "", "wav_name": "a.wav", "is_final": True, "is_end": True}


@pytest.mark.parametrize(
    ("fields", "itn"),
    [
        ({"itn": False}, False),  # FunASR's own clients' name
        ({"itn": True}, True),
        ({"svs_itn": False}, False),
        ({"itn": True, "svs_itn": False}, False),  # SenseVoice's own key is the more specific
        ({}, True),
    ],
)
def test_itn_is_read_under_either_name(fields: dict[str, bool], itn: bool) -> None:
    (configure,) = codec().decode(config(**fields))
    assert isinstance(configure, Configure) and configure.options.itn is itn


def test_upstreams_end_marker_ends_the_input() -> None:
    c = codec()
    c.decode(config())
    assert c.decode(json.dumps({"is_end": True}))[-1] == Stop()


def test_an_error_about_a_config_message_still_names_its_stream() -> None:
    c = codec()
    with pytest.raises(InvalidFieldError):
        c.decode(config(wav_name="bad.wav", audio_fs=12345))
    (message,) = parsed(c.encode(ErrorEvent("invalid_field", "audio_fs")))
    assert message["wav_name"] == "bad.wav" and message["is_final"] is False


# ---- timestamps ---------------------------------------------------------------------


def tokens(*spec: tuple[str, int, int]) -> tuple[Token, ...]:
    return tuple(Token(i, text, a, b) for i, (text, a, b) in enumerate(spec))


def sentences(toks: tuple[Token, ...], offset: int = 0) -> list[dict[str, Any]]:
    return [s.to_dict() for s in split_sentences(toks, offset)]


def test_cjk_pieces_are_split_into_timed_characters() -> None:
    toks = tokens((" 今天", 0, 120), ("天气", 120, 240), ("，", 240, 260), ("好", 300, 360))
    assert sentences(toks, 1000) == [
        {
            "text_seg": "今 天 天 气",
            "punc": "，",
            "start": 1000,
            "end": 1240,
            "ts_list": [[1000, 1060], [1060, 1120], [1120, 1180], [1180, 1240]],
        },
        {"text_seg": "好", "punc": "", "start": 1300, "end": 1360, "ts_list": [[1300, 1360]]},
    ]


def test_words_numbers_and_runs_of_punctuation() -> None:
    toks = tokens(
        (",", 0, 10),  # nothing before it: no sentence to end
        (" it", 10, 100),
        (" costs", 100, 200),
        (" 3", 200, 260),
        (".", 260, 280),
        ("5", 280, 300),  # "3.5" is one number
        ("?", 300, 310),
        ("!", 310, 320),  # "?!" ends the same sentence
        (" ", 330, 340),  # a bare word boundary
        ("ok", 340, 400),
        ("日本", 400, 500),
        ("go", 500, 560),  # a word after CJK text starts anew
    )
    assert [(s["text_seg"], s["punc"]) for s in sentences(toks)] == [
        ("it costs 3.5", "?!"),
        ("ok 日 本 go", ""),
    ]
    assert sentences(toks)[0]["ts_list"][-1] == [200, 300]


def test_stamp_fields_are_absent_without_timed_words() -> None:
    assert stamp_fields((), 0) == {}
    assert stamp_fields(tokens(("。", 0, 60), (" ", 60, 70)), 0) == {}


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.text(alphabet=" ab3.,?。今天", max_size=4), st.integers(0, 500)),
        max_size=12,
    )
)
def test_any_tokens_give_ordered_units_inside_their_spans(spec: list[tuple[str, int]]) -> None:
    start, toks = 0, []
    for i, (text, length) in enumerate(spec):
        toks.append(Token(i, text, start, start + length))
        start += length
    fields = stamp_fields(tuple(toks), 1000)
    pairs = json.loads(fields["timestamp"]) if fields else []
    assert pairs == sorted(pairs) and all(1000 <= a <= b <= 1000 + start for a, b in pairs)
    if fields:
        assert pairs == [p for s in fields["stamp_sents"] for p in s["ts_list"]]


# ---- a real Session through the codec -----------------------------------------------

SR = 16000


class FunasrSession:
    """A Session driven through the FunASR codec as a connection drives it, without sockets."""

    def __init__(self, transcribe: Transcribe = fake_transcript) -> None:
        config = SessionConfig(segmenter=SegmenterConfig(preroll_ms=0))
        self.session = Session("s1", config, EnergyVadModel())
        self.codec = FunasrCodec(SessionLimits())
        self.transcribe = transcribe
        self.close_code: int | None = None
        self.messages: list[dict[str, Any]] = []
        self.events: list[SessionEvent] = []

    def send(self, message: str | bytes, now: float) -> None:
        try:
            for command in self.codec.decode(message):
                self.session.handle(command, now)
        except ProtocolError as exc:
            assert self.codec.is_fatal(exc)
            self.close_code = self.close_code or self.codec.close_code(exc)
            self.session.abort(exc, now)
        self.pump()

    def pump(self) -> None:
        for request in self.session.requests_to_submit():
            self.session.receive_result(InferenceResult(request.ref, self.transcribe(request)), 0.0)
        for event in self.session.events_to_send():
            self.events.append(event)
            self.messages += parsed(self.codec.encode(event))


def stream(client: FunasrSession, first: str, data: bytes, chunk: int = 19200) -> None:
    client.send(first, 0.0)
    for i, piece in enumerate(chunks(data, chunk)):
        client.send(piece, i * 0.001)  # as fast as a file is read
    client.send(config(is_speaking=False), 1.0)


def check_envelope(messages: list[dict[str, Any]], wav_name: str, mode: str) -> None:
    """Every message has the four keys; exactly one is final, the last: the end-of-input
    acknowledgement, in the client's mode, with no text."""
    for m in messages[:-1]:
        assert {"mode", "text", "wav_name", "is_final"} <= set(m)
        assert m["mode"] in ("2pass-online", "2pass-offline") and m["wav_name"] == wav_name
    assert [m["is_final"] for m in messages].count(True) == 1
    assert messages[-1] == {
        "mode": mode,
        "text": "",
        "wav_name": wav_name,
        "is_final": True,
        "is_end": True,
    }


def v1_final_texts(data: bytes, transcribe: Transcribe = fake_transcript) -> list[str]:
    """The same audio through protocol v1: the finals' texts."""
    config_ = SessionConfig(segmenter=SegmenterConfig(preroll_ms=0))
    v1 = V1Session(Session("s1", config_, EnergyVadModel()))
    events: list[SessionEvent] = []
    messages: list[bytes | str] = ['{"type":"start","pace":"replay"}', *chunks(data, 19200)]
    for i, message in enumerate([*messages, '{"type":"stop"}']):
        if isinstance(message, bytes):
            v1.receive_audio(message, i * 0.01)
        else:
            v1.receive_text(message, i * 0.01)
        for r in v1.requests_to_submit():
            v1.receive_result(InferenceResult(r.ref, transcribe(r)), 0.0)
        events += v1.events_to_send()
    return [e.transcript.text for e in events if isinstance(e, Final)]


@pytest.mark.parametrize("mode", ["offline", "2pass"])
def test_a_wav_file_through_a_session_gives_v1s_finals(mode: str) -> None:
    audio = to_s16le(tone_bursts([(0.5, 2.0), (3.0, 4.5)], 6.0))
    client = FunasrSession()
    stream(client, config(mode=mode, wav_name="t.wav", is_speaking=True), wav_header() + audio)
    check_envelope(client.messages, "t.wav", mode)
    offline = [m for m in client.messages if m["mode"] == "2pass-offline" and not m["is_final"]]
    assert [m["text"] for m in offline] == v1_final_texts(audio)
    assert len(offline) == 2 and offline[0]["start_ms"] == 500
    assert client.close_code is None


def test_online_mode_increments_add_up_to_each_final() -> None:
    audio = to_s16le(tone_bursts([(0.3, 3.3), (4.0, 5.5)], 6.0))
    client = FunasrSession(word_transcript)
    stream(client, config(mode="online"), audio, chunk=3200)
    check_envelope(client.messages, "wav-default-id", "online")
    online = [m["text"] for m in client.messages if m["mode"] == "2pass-online"]
    # Nothing replaces online text, and partials promise none: each utterance's text comes
    # whole when its final does (issue 33), so nothing shown is ever wrong.
    assert online == v1_final_texts(audio, word_transcript)


def test_2pass_mode_streams_provisional_text_that_the_offline_result_replaces() -> None:
    audio = to_s16le(tone_bursts([(0.3, 3.3)], 4.0))
    client = FunasrSession(word_transcript)
    stream(client, config(mode="2pass"), audio, chunk=3200)
    modes = [m["mode"] for m in client.messages[:-1]]  # the last is the acknowledgement
    assert modes.count("2pass-online") >= 3 and modes[-1] == "2pass-offline"
    assert modes.index("2pass-offline") == len(modes) - 1  # online text came during speech
    texts = [m["text"] for m in client.messages[:-1]]
    assert [texts[-1]] == v1_final_texts(audio, word_transcript)


def test_8khz_audio_is_resampled_like_v1() -> None:
    audio = tone_bursts([(0.5, 2.0)], 3.0)
    narrow = to_s16le(audio[::2])  # 8 kHz
    client = FunasrSession()
    stream(client, config(mode="offline", audio_fs=8000), narrow)
    (configured,) = [e for e in client.events if isinstance(e, Configured)]
    assert configured.audio.sample_rate == 8000
    assert len([m for m in client.messages if m["text"]]) == 1


def test_a_bad_message_mid_stream_still_delivers_owed_finals() -> None:
    audio = to_s16le(tone_bursts([(0.5, 3.0)], 3.0))  # speech still open at the error
    client = FunasrSession()
    client.send(config(mode="offline"), 0.0)
    for piece in chunks(audio, 19200):
        client.send(piece, 0.0)
    client.send(config(audio_fs=8000), 0.5)  # the format is fixed once audio flows
    first, owed, end = client.messages
    assert (first["error"]["code"], first["is_final"]) == ("unexpected_message", False)
    assert owed["text"] and not owed["is_final"]
    # The end is acknowledged, and says the stream did not end well.
    assert end["is_end"] and not end["is_final"] and "unexpected_message" in end["error"]
    assert client.close_code == 1002


def test_a_labelled_final_names_its_speaker_as_funasrs_server_does() -> None:
    c = codec()
    c.decode(config(mode="2pass"))
    named = replace(final(), speaker="S2", speaker_score=0.83456)
    (offline,) = parsed(c.encode(named))
    assert offline["spk_name"] == "S2" and offline["spk_score"] == 0.8346
    (plain,) = parsed(c.encode(final(utt_id=1)))
    assert "spk_name" not in plain and "spk_score" not in plain
