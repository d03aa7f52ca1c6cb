"""The Genesys AudioHook (v2) codec: every message and error path, over a real session core."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest

from engine.types import InferenceRequest, InferenceResult, Token, Transcript
from streaming.audio.decoder import AudioFormat
from streaming.commands import Audio, Command, Configure, Stop, StreamOptions
from streaming.core import SessionCore
from streaming.errors import (
    CLOSE_INVALID_PAYLOAD,
    CLOSE_MESSAGE_TOO_BIG,
    CLOSE_POLICY_VIOLATION,
    CLOSE_PROTOCOL_ERROR,
    InvalidFieldError,
    ProtocolError,
)
from streaming.events import Ended, ErrorEvent, Final, Partial
from streaming.limits import SessionLimits
from streaming.protocols.audiohook.codec import (
    MAX_FILL_S,
    MAX_INFO_CHARS,
    AudioHookCodec,
    make_audiohook_codec,
)
from streaming.protocols.audiohook.messages import (
    MAX_TEXT_BYTES,
    NULL_UUID,
    Media,
    choose_media,
    duration_field,
    format_duration,
)
from streaming.protocols.audiohook.timeline import Timeline
from streaming.protocols.audiohook.transcript import (
    SUPPORTED_LANGUAGES,
    language_tag,
    stream_language,
)
from streaming.protocols.base import CodecSettings, Frame, Handshake
from streaming.protocols.caps import MAX_REDACT_ITEMS
from streaming.redaction.policies import Policy, Redaction
from streaming.segmenter import SegmenterConfig
from streaming.session import SessionConfig
from tests.speech import chunks
from tests.streaming.fakes import EnergyVadModel, tone_bursts, word_transcript
from tools.g711 import encode_mulaw

SID = "7f0c5e2a-3b4d-4c6e-8f10-2a3b4c5d6e7f"
ORG = "d7934305-0972-4844-938e-9060eef73d05"
CONVERSATION = "090eaa2f-72fa-480a-83e0-8667ff89c0ec"
PARTICIPANT = {
    "id": "883efee8-3d6c-4537-b500-6d7ca4b92fa0",
    "ani": "+1-555-555-1234",
    "aniName": "John Doe",
    "dnis": "+1-800-555-6789",
}
OPEN: dict[str, Any] = {
    "organizationId": ORG,
    "conversationId": CONVERSATION,
    "participant": PARTICIPANT,
}
STEREO = {"type": "audio", "format": "PCMU", "channels": ["external", "internal"], "rate": 8000}
RATE = 8000
FRAME = 2 * RATE // 10  # 100 ms of stereo μ-law
LANGUAGE_TAG = re.compile(r"[a-z]{2,3}-[A-Za-z]{2,3}")


def media(*channels: str, fmt: str = "PCMU", rate: int = RATE) -> dict[str, Any]:
    return {"type": "audio", "format": fmt, "channels": list(channels), "rate": rate}


Spans = list[tuple[float, float]]


def stereo_call(left: Spans, right: Spans, seconds: float) -> bytes:
    """Interleaved μ-law at 8 kHz: a tone where each channel 'speaks'."""
    tracks = [encode_mulaw(tone_bursts(spans, seconds, RATE)) for spans in (left, right)]
    return np.stack([np.frombuffer(t, np.uint8) for t in tracks], axis=1).tobytes()


class Link:
    """The codec over a real session core, driven as a connection drives them.

    Engine requests are answered at once (the word fake) unless `hold` is set; server
    messages are parsed in order; the first error's close code is kept.
    """

    def __init__(self, headers: dict[str, str] | None = None, **limits: Any) -> None:
        handshake = Handshake(headers=headers if headers is not None else {})
        settings = CodecSettings(SessionLimits(**limits))
        self.codec = make_audiohook_codec(handshake, settings)
        config = SessionConfig(segmenter=SegmenterConfig(preroll_ms=0))
        self.core = SessionCore("core", config, EnergyVadModel())
        self.messages: list[dict[str, Any]] = []
        self.commands: list[Command] = []
        self.events: list[Any] = []
        self.close_code: int | None = None
        self.hold = False
        self.pending: list[InferenceRequest] = []
        self.now = 0.0
        self.seq = 0
        self.position = 0  # the client's, in samples

    # -- the client's side --
    def send(self, kind: str, seq: int | None = None, **parameters: Any) -> None:
        self.seq = self.seq + 1 if seq is None else seq
        self.receive(json.dumps(self.envelope(kind, parameters)))

    def envelope(self, kind: str, parameters: dict[str, Any]) -> dict[str, Any]:
        return {
            "version": "2",
            "id": SID,
            "type": kind,
            "seq": self.seq,
            "serverseq": self.messages[-1]["seq"] if self.messages else 0,
            "position": format_duration(self.position * 1000 // RATE),
            "parameters": parameters,
        }

    def open(self, *offers: dict[str, Any], **extra: Any) -> None:
        parameters = {
            "organizationId": ORG,
            "conversationId": CONVERSATION,
            "participant": PARTICIPANT,
            "media": list(offers) or [STEREO, media("external"), media("internal")],
            "language": "en-US",
            **extra,
        }
        self.send("open", **parameters)

    def audio(self, data: bytes, frame: int = FRAME, channels: int = 2) -> None:
        for piece in chunks(data, frame):
            self.now += len(piece) / channels / RATE
            self.position += len(piece) // channels
            self.receive(piece)

    # -- the connection's side --
    def receive(self, message: Frame) -> None:
        try:
            commands = self.codec.decode(message)
            self.commands += commands
            for command in commands:
                self.core.handle(command, self.now)
        except ProtocolError as exc:
            if self.close_code is None:
                self.close_code = self.codec.close_code(exc)
            self.core.abort(exc, self.now)
        self.pump()

    def pump(self) -> None:
        self.pending += self.core.requests_to_submit()
        while self.pending and not self.hold:
            request = self.pending.pop(0)
            result = InferenceResult(request.ref, word_transcript(request))
            self.core.receive_result(result, self.now)
            self.pending += self.core.requests_to_submit()
        for event in self.core.events_to_send():
            self.events.append(event)
            self.messages += [json.loads(frame) for frame in self.codec.encode(event)]

    def release(self) -> None:
        self.hold = False
        self.pump()

    # -- what came back --
    def of(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["type"] == kind]

    @property
    def kinds(self) -> list[str]:
        return [m["type"] for m in self.messages]

    def transcripts(self) -> list[dict[str, Any]]:
        return [e["data"] for m in self.of("event") for e in m["parameters"]["entities"]]

    def configures(self) -> list[Configure]:
        return [c for c in self.commands if isinstance(c, Configure)]

    def audio_sent(self) -> bytes:
        return b"".join(c.data for c in self.commands if isinstance(c, Audio))


def opened_link(*offers: dict[str, Any], **extra: Any) -> Link:
    link = Link({"audiohook-session-id": SID})
    link.open(*offers, **extra)
    return link


def disconnected(link: Link, info: str) -> dict[str, Any]:
    """The link's one disconnect, which must say `info` and come last (nothing follows)."""
    (message,) = link.of("disconnect")
    assert message["parameters"]["reason"] == "error"
    assert info in message["parameters"]["info"], message
    assert link.kinds[-1] == "disconnect"
    return message


# ---- envelope, seq and clientseq -------------------------------------------------------


def test_open_gets_opened_with_the_stereo_media_and_names_the_stream() -> None:
    link = opened_link()
    (opened,) = link.messages
    assert opened == {
        "version": "2",
        "type": "opened",
        "seq": 1,
        "clientseq": 1,
        "id": SID,
        "parameters": {"startPaused": False, "media": [STEREO]},
    }
    (configure,) = link.configures()
    assert configure == Configure(
        AudioFormat("mulaw", RATE, 2),
        StreamOptions(language="en"),
        ("external", "internal"),
        CONVERSATION,
    )
    assert link.close_code is None


def test_server_seq_counts_from_one_and_clientseq_echoes_the_last_client_seq() -> None:
    link = opened_link()
    link.send("ping")
    link.send("update", language="en-GB")  # same model language: no reply, no command
    link.send("ping")
    link.audio(stereo_call([(0.2, 1.0)], [], 2.0))
    link.send("close", reason="end")
    assert link.kinds == ["opened", "pong", "pong", "event", "closed"]
    assert [m["seq"] for m in link.messages] == [1, 2, 3, 4, 5]
    # A pong answers its ping's seq; other messages the last seq seen.
    assert [m["clientseq"] for m in link.messages] == [1, 2, 4, 4, 5]
    assert {m["id"] for m in link.messages} == {SID}
    assert all(m["version"] == "2" for m in link.messages)


def test_the_session_id_comes_from_the_first_message_without_the_header() -> None:
    link = Link()
    link.open()
    assert link.of("opened")[0]["id"] == SID


@pytest.mark.parametrize("seq", [0, 2, 3])
def test_a_first_message_out_of_sequence_disconnects(seq: int) -> None:
    link = Link({"audiohook-session-id": SID})
    link.seq = seq - 1
    link.open()
    disconnected(link, f"seq {seq} is out of sequence")
    assert link.close_code == CLOSE_PROTOCOL_ERROR
    assert link.messages[0]["id"] == SID and link.messages[0]["seq"] == 1


@pytest.mark.parametrize("seq", [1, 2, 4, 9])
def test_a_repeated_or_skipped_seq_disconnects_after_the_owed_finals(seq: int) -> None:
    link = opened_link()
    link.send("ping")  # seq 2
    link.audio(stereo_call([(0.2, 5.0)], [], 1.0))  # speech still open: a final is owed
    link.send("ping", seq=seq)
    assert link.kinds == ["opened", "pong", "disconnect", "event"]
    assert "out of sequence" in link.of("disconnect")[0]["parameters"]["info"]
    assert link.close_code == CLOSE_PROTOCOL_ERROR
    assert isinstance(link.events[-1], Ended)


def test_a_serverseq_ahead_of_the_server_disconnects() -> None:
    link = opened_link()
    message = link.envelope("ping", {}) | {"seq": 2, "serverseq": 5}
    link.receive(json.dumps(message))
    disconnected(link, "serverseq 5 is ahead of the server's last seq 1")
    assert link.close_code == CLOSE_POLICY_VIOLATION


def test_another_session_id_disconnects() -> None:
    link = opened_link()
    link.seq += 1
    message = link.envelope("ping", {}) | {"id": "11111111-2222-4333-8444-555555555555"}
    link.receive(json.dumps(message))
    disconnected(link, "is not this session's")


@pytest.mark.parametrize(
    ("text", "info", "code"),
    [
        ("{not json", "not valid JSON", CLOSE_INVALID_PAYLOAD),
        ("[1, 2]", "must be a JSON object", CLOSE_INVALID_PAYLOAD),
        (json.dumps({"type": "open"}), "version None is not supported", CLOSE_POLICY_VIOLATION),
    ],
)
def test_bad_json_disconnects(text: str, info: str, code: int) -> None:
    link = Link({"audiohook-session-id": SID})
    link.receive(text)
    message = disconnected(link, info)
    assert message["id"] == SID and message["clientseq"] == 0
    assert link.close_code == code


@pytest.mark.parametrize("version", ["1", 2, "3", None])
def test_a_wrong_version_disconnects(version: Any) -> None:
    link = Link()
    link.seq = 1
    message = link.envelope("open", {}) | {"version": version}
    link.receive(json.dumps(message))
    disconnected(link, "this server speaks AudioHook version 2")
    assert link.messages[0]["id"] == NULL_UUID  # no id was taken from a bad message


@pytest.mark.parametrize(
    ("field", "value", "info"),
    [
        ("id", "not-a-uuid", "id must be a UUID"),
        ("seq", "1", "seq must be a non-negative integer"),
        ("seq", True, "seq must be a non-negative integer"),
        ("serverseq", -1, "serverseq must be a non-negative integer"),
        ("position", "1.5", "position must be a duration"),
        ("position", "PT-1S", "position must be a duration"),
        ("parameters", [], "parameters must be a JSON object"),
        ("type", 7, "type must be a string"),
    ],
)
def test_a_malformed_envelope_disconnects(field: str, value: Any, info: str) -> None:
    link = Link()
    link.seq = 1
    link.receive(json.dumps(link.envelope("open", {}) | {field: value}))
    disconnected(link, info)


@pytest.mark.parametrize("kind", ["opened", "pong", "start", "playback", "dtmf_pressed", ""])
def test_an_unknown_message_type_disconnects(kind: str) -> None:
    link = opened_link()
    link.send(kind)
    disconnected(link, f"{kind!r} is not an AudioHook client message")
    assert link.close_code == CLOSE_PROTOCOL_ERROR


def test_a_text_message_over_64_kib_disconnects() -> None:
    link = opened_link()
    link.send("error", code=500, message="x" * MAX_TEXT_BYTES)
    disconnected(link, "over AudioHook's 65535 byte limit")
    assert link.close_code == CLOSE_MESSAGE_TOO_BIG


# ---- open and media ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offers", "chosen"),
    [
        ([STEREO, media("external"), media("internal")], STEREO),
        ([media("internal", "external"), media("internal")], media("internal", "external")),
        ([media("external"), STEREO], STEREO),  # two channels beat the client's order
        ([media("internal")], media("internal")),
        ([media("external", "internal", fmt="L16"), media("external")], media("external")),
        ([media("external", "internal", rate=16000), media("internal")], media("internal")),
    ],
)
def test_opened_takes_stereo_pcmu_at_8_khz_else_mono(
    offers: list[dict[str, Any]], chosen: dict[str, Any]
) -> None:
    link = opened_link(*offers)
    assert link.of("opened")[0]["parameters"]["media"] == [chosen]
    (configure,) = link.configures()
    channels = tuple(chosen["channels"])
    assert configure.audio == AudioFormat("mulaw", RATE, len(channels))
    # Labels name each channel in the offer's order; a mono stream needs none.
    assert configure.channel_labels == (channels if len(channels) == 2 else ())


@pytest.mark.parametrize(
    "offers",
    [
        [],
        [media("external", "internal", fmt="L16")],
        [media("external", "internal", rate=16000), media("external", fmt="opus")],
    ],
)
def test_unsupported_media_disconnects(offers: list[dict[str, Any]]) -> None:
    link = Link()
    link.send("open", **OPEN, media=offers)
    disconnected(link, "none of the offered media is supported")
    assert link.close_code == CLOSE_POLICY_VIOLATION
    assert not link.configures()


@pytest.mark.parametrize(
    ("change", "info"),
    [
        ({"media": {"type": "audio"}}, "media must be a list"),
        ({"media": [media("external", "external")]}, "once each"),
        ({"media": [media("caller")]}, 'list "external" and/or "internal"'),
        ({"media": [media()]}, 'list "external" and/or "internal"'),
        ({"media": [{"type": "video"}]}, 'type "audio"'),
        ({"media": [media("external") | {"rate": "8000"}]}, "integer rate"),
        ({"conversationId": "call-1"}, "conversationId must be a UUID"),
        ({"organizationId": None}, "organizationId must be a UUID"),
        ({"participant": "x"}, "participant must be a JSON object"),
        ({"language": 7}, "language must be a BCP 47 tag"),
        ({"supportedLanguages": "yes"}, "supportedLanguages must be true or false"),
    ],
)
def test_a_malformed_open_disconnects(change: dict[str, Any], info: str) -> None:
    link = Link()
    link.send("open", **(OPEN | {"media": [STEREO]} | change))
    disconnected(link, info)


def test_custom_config_adds_redaction_policies() -> None:
    link = opened_link(customConfig={"redact": ["pci", "ssn"], "redact_mask": True, "x": 1})
    (configure,) = link.configures()
    expected = Redaction(frozenset({Policy.PCI, Policy.SSN}), mask=True)
    assert configure.options.redact == expected
    bad = opened_link(customConfig={"redact": "pci,cards"})
    disconnected(bad, "unknown redaction policy cards")
    # A list longer than any needs is refused by its length, before its entries are read.
    long = opened_link(customConfig={"redact": ["pci"] * (MAX_REDACT_ITEMS + 1)})
    disconnected(long, f"at most {MAX_REDACT_ITEMS}")


def test_opened_lists_the_supported_languages_when_asked() -> None:
    link = opened_link(supportedLanguages=True)
    languages = link.of("opened")[0]["parameters"]["supportedLanguages"]
    assert languages == list(SUPPORTED_LANGUAGES)
    assert all(LANGUAGE_TAG.fullmatch(tag) for tag in languages)
    assert "supportedLanguages" not in opened_link().of("opened")[0]["parameters"]


def test_a_connection_probe_names_no_stream() -> None:
    link = opened_link(conversationId=NULL_UUID)
    assert link.configures()[0].stream_id is None
    assert link.of("opened")


def test_a_second_open_disconnects() -> None:
    link = opened_link()
    link.open()
    disconnected(link, "open after open")


@pytest.mark.parametrize(
    ("tag", "language"),
    [
        ("en-US", "en"),
        ("en-GB", "en"),
        ("zh-CN", "zh"),
        ("cmn-CN", "zh"),
        ("yue-HK", "yue"),
        ("ja-JP", "ja"),
        ("ko-KR", "ko"),
        ("zh-HK", "auto"),
        ("fr-FR", "auto"),
        ("en", "en"),
        ("zh-Hant-TW", "zh"),
        (None, "auto"),
    ],
)
def test_the_open_language_sets_the_model_language(tag: str | None, language: str) -> None:
    assert stream_language(tag) == language
    link = Link()
    link.send("open", **OPEN, media=[STEREO], **({} if tag is None else {"language": tag}))
    assert link.configures()[0].options.language == language


# A tag goes back in transcripts as sent: only a BCP 47 shape is taken. "\ud800" is a lone
# surrogate: as a JSON escape the JSON reader refuses it, as a raw character (a str handed
# to the codec) the tag check does.
BAD_TAGS = ["", "en US", "en_US", "en-", "-US", "en--US", "1en", "e" * 9, "en-US\n", "\ud800"]
BAD_TAGS += ["en-" + "-".join(["abcdefgh"] * 4), "en-ÜS", 7, None]


@pytest.mark.parametrize("tag", BAD_TAGS)
def test_an_open_language_that_is_no_bcp_47_tag_disconnects(tag: Any) -> None:
    link = Link()
    link.seq = 1
    message = link.envelope("open", OPEN | {"media": [STEREO], "language": tag})
    if tag is None:
        del message["parameters"]["language"]  # absent is fine: the model detects
        link.receive(json.dumps(message))
        assert link.kinds == ["opened"]
        return
    link.receive(json.dumps(message, ensure_ascii=False))
    disconnected(link, "language must be a BCP 47 tag")
    assert not link.configures()


@pytest.mark.parametrize("tag", [t for t in BAD_TAGS if t is not None])
def test_an_update_language_that_is_no_bcp_47_tag_disconnects(tag: Any) -> None:
    link = opened_link()
    link.seq += 1
    link.receive(json.dumps(link.envelope("update", {"language": tag}), ensure_ascii=False))
    disconnected(link, "update: language must be a BCP 47 tag")
    assert len(link.configures()) == 1


def test_a_lone_surrogate_escape_is_refused_before_it_is_read() -> None:
    link = Link()
    link.seq = 1
    text = json.dumps(link.envelope("open", OPEN | {"media": [STEREO], "language": "\ud800"}))
    assert "\\ud800" in text  # the JSON escape, as a client would send it
    link.receive(text)
    disconnected(link, "unpaired UTF-16 surrogate")


def test_a_disconnect_quotes_a_long_client_value_only_in_part() -> None:
    link = opened_link()
    link.send("update", language="x" * 60_000)
    info = disconnected(link, "update: language must be a BCP 47 tag")["parameters"]["info"]
    assert len(info) == MAX_INFO_CHARS and info.endswith("…")


def test_transcripts_name_the_clients_tag_when_the_model_heard_its_language() -> None:
    assert language_tag("en", "en-GB") == "en-GB"
    assert language_tag("en", "fr-FR") == "en-US"
    assert language_tag("zh", "cmn-CN") == "cmn-CN"
    assert language_tag("yue", None) == "yue-HK"
    assert language_tag("nospeech", "en-US") is None
    assert language_tag("unknown", None) is None


# ---- audio -----------------------------------------------------------------------------


def test_audio_before_open_disconnects() -> None:
    link = Link({"audiohook-session-id": SID})
    link.receive(b"\xff" * FRAME)
    message = disconnected(link, "audio before open")
    assert message["id"] == SID
    assert link.close_code == CLOSE_PROTOCOL_ERROR


def test_stereo_audio_is_taken_as_interleaved_frames() -> None:
    link = opened_link()
    call = stereo_call([(0.2, 1.0)], [(1.5, 2.5)], 3.5)
    link.audio(call, frame=2 * RATE // 50)  # 20 ms frames
    assert link.audio_sent() == call
    link.send("close", reason="end")
    channels = sorted((t["channelId"], t["offset"], t["duration"]) for t in link.transcripts())
    assert channels == [(0, "PT0.2S", "PT0.8S"), (1, "PT1.5S", "PT1S")]


def test_mono_audio_is_one_channel_and_channel_id_0() -> None:
    link = opened_link(media("internal"))
    call = np.frombuffer(stereo_call([(0.3, 1.2)], [], 2.0), np.uint8)[0::2].tobytes()
    link.audio(call, frame=RATE // 10, channels=1)
    link.send("close", reason="end")
    (transcript,) = link.transcripts()
    assert transcript["channelId"] == 0 and transcript["offset"] == "PT0.3S"


def test_a_frame_of_part_samples_disconnects() -> None:
    link = opened_link()
    link.receive(b"\xff" * 3)
    disconnected(link, "an audio frame of 3 bytes is not whole 2-channel samples")
    assert link.close_code == CLOSE_INVALID_PAYLOAD


def test_a_frame_over_the_limit_disconnects() -> None:
    link = Link({"audiohook-session-id": SID}, max_frame_bytes=4096)
    link.open()
    link.receive(b"\xff" * 4098)
    disconnected(link, "audio frame of 4098 bytes is over the 4096 byte limit")
    assert link.close_code == CLOSE_MESSAGE_TOO_BIG


def test_an_empty_frame_is_nothing() -> None:
    link = opened_link()
    link.receive(b"")
    assert link.close_code is None and not link.audio_sent()


# ---- transcripts -----------------------------------------------------------------------


def test_a_final_is_a_transcript_event_of_the_connector_form() -> None:
    link = opened_link()
    link.audio(stereo_call([], [(0.5, 1.7)], 2.5))
    link.send("close", reason="end")
    (event,) = link.of("event")
    (entity,) = event["parameters"]["entities"]
    assert entity["type"] == "transcript"
    data = entity["data"]
    uuid_pattern = r"[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
    assert re.fullmatch(uuid_pattern, data["id"])
    assert {k: v for k, v in data.items() if k not in ("id", "alternatives")} == {
        "channelId": 1,
        "isFinal": True,
        "offset": "PT0.5S",
        "duration": "PT1.2S",
    }
    (alternative,) = data["alternatives"]
    assert alternative["confidence"] == 1.0 and alternative["languages"] == ["en-US"]
    (display,) = alternative["interpretations"]
    assert display["type"] == "display" and display["transcript"] == "w2 w3 w4"
    # Words at the word fake's stream times (word k: [300k + 50, 300k + 250) ms).
    assert display["tokens"] == [
        {
            "type": "word",
            "value": f"w{k}",
            "confidence": 1.0,
            "offset": format_duration(300 * k + 50),
            "duration": "PT0.2S",
            "language": "en-US",
        }
        for k in (2, 3, 4)
    ]


def test_transcript_ids_are_distinct_and_stable() -> None:
    runs = []
    for _ in range(2):
        link = opened_link()
        link.audio(stereo_call([(0.2, 0.8), (1.6, 2.2)], [(0.2, 0.8)], 3.0))
        link.send("close", reason="end")
        runs.append([t["id"] for t in link.transcripts()])
    assert runs[0] == runs[1] and len(set(runs[0])) == 3


def test_partials_and_empty_finals_are_not_sent() -> None:
    codec = AudioHookCodec(SessionLimits(), SID)
    assert codec.encode(Partial(1, 0, 500, "w1", 2)) == ()
    empty = Transcript("", "nospeech", "unknown", "unknown", True, "")
    assert codec.encode(Final(1, 0, 500, empty)) == ()


def test_a_transcript_too_long_for_the_client_goes_without_its_words() -> None:
    codec = AudioHookCodec(SessionLimits(), SID)
    tokens = tuple(Token(k, f" w{k}", 10 * k, 10 * k + 8) for k in range(1500))
    text = "".join(t.text for t in tokens).strip()
    final = Final(1, 0, 15_000, Transcript(text, "en", "neutral", "speech", True, text, tokens))
    (frame,) = codec.encode(final)
    assert isinstance(frame, str) and len(frame.encode()) <= MAX_TEXT_BYTES
    message = json.loads(frame)
    display = message["parameters"]["entities"][0]["data"]["alternatives"][0]["interpretations"][0]
    assert display["transcript"] == text and "tokens" not in display
    assert message["seq"] == 1  # the longer try was never sent


# ---- ping, update, error, dtmf -------------------------------------------------------


def test_ping_before_open_disconnects() -> None:
    link = Link()
    link.send("ping")
    disconnected(link, "'ping' before open")


def test_update_changes_the_language_without_a_reply() -> None:
    link = opened_link()
    link.send("update", language="ja-JP")
    assert link.kinds == ["opened"]
    assert [c.options.language for c in link.configures()] == ["en", "ja"]
    link.send("update", language="ja-JP")
    assert len(link.configures()) == 2  # nothing changed: no Configure
    link.send("ping")  # the pong changes nothing either
    assert all(c.options.language == "ja" for c in link.configures()[1:])
    assert link.kinds == ["opened", "pong"]
    # The language is optional in an update: without one, nothing this server keeps changes.
    link.send("update", language=None)
    link.send("update")
    assert len(link.configures()) == 2 and link.kinds == ["opened", "pong"]


def test_client_errors_dtmf_and_playback_are_taken_and_change_nothing() -> None:
    link = opened_link()
    link.send("error", code=429, message="Too many requests", retryAfter="PT2S")
    link.send("dtmf", digit="5")
    # Audio Connector's (voice bots) playback reports: this server plays nothing.
    link.send("playback_started")
    link.send("playback_completed")
    link.audio(stereo_call([], [], 0.5))
    link.send("playback_started")
    assert link.kinds == ["opened"] and link.close_code is None
    assert [type(c) for c in link.commands] == [Configure] + [Audio] * 5
    link.send("error", code="429", message="x")
    disconnected(link, "code must be a non-negative integer")


def test_playback_reports_before_open_and_while_closing_change_nothing() -> None:
    link = Link({"audiohook-session-id": SID})
    link.send("playback_completed")
    assert link.messages == [] and link.commands == []
    link.open()
    link.send("close", reason="end")
    link.send("playback_completed")
    assert link.kinds == ["opened", "closed"] and link.close_code is None


# ---- pause, resume, discarded ----------------------------------------------------------


def test_paused_audio_is_an_error() -> None:
    link = opened_link()
    link.send("paused")
    link.receive(b"\xff" * FRAME)
    disconnected(link, "audio while paused")


def spans_of(link: Link) -> list[tuple[int, float, float]]:
    """(channel, offset s, duration s) of each transcript Genesys got."""
    return [
        (t["channelId"], seconds(t["offset"]), seconds(t["duration"])) for t in link.transcripts()
    ]


def seconds(duration: str) -> float:
    return float(duration.removeprefix("PT").removesuffix("S"))


def test_a_pause_ends_the_utterance_in_progress_and_the_fill_keeps_positions() -> None:
    link = opened_link()
    # The customer speaks from 0.2 s to 2.5 s; the call pauses at 1.5 s, mid-word.
    call = stereo_call([(0.2, 2.5)], [], 3.0)
    link.audio(call[: 2 * RATE * 3 // 2])
    before = len(link.audio_sent())
    link.send("paused")
    assert [type(c).__name__ for c in link.commands[-1:]] == ["Cut"]
    link.now += 3.0
    link.send("resumed", start="PT1.5S", discarded="PT3S")
    fill = link.audio_sent()[before:]
    assert fill == b"\xff" * (2 * 3 * RATE)
    fills = [c for c in link.commands if isinstance(c, Audio)][-3:]
    assert [len(c.data) for c in fills] == [2 * RATE] * 3  # a second at a time
    link.position += 3 * RATE
    link.audio(call[2 * RATE * 3 // 2 :])  # the rest of the call, at 4.5 s
    link.send("close", reason="end")
    (first, second) = spans_of(link)
    # The pause cut the utterance where it fell (the resampler holds back a few ms).
    assert first[:2] == (0, 0.2) and first[2] == pytest.approx(1.3, abs=0.06)
    assert second[:2] == (0, 4.5) and second[2] == pytest.approx(1.0, abs=0.06)
    # The stream's own times are AudioHook's.
    finals = [e for e in link.events if isinstance(e, Final) and e.transcript.text]
    assert [f.start_ms for f in finals] == [200, 4500]


def test_a_repeated_pause_changes_nothing() -> None:
    link = opened_link()
    link.audio(stereo_call([(0.2, 2.0)], [], 1.0))
    link.send("paused")
    cuts = len(link.commands)
    link.send("paused")  # Genesys' reference client sends it twice
    assert len(link.commands) == cuts and link.close_code is None
    link.send("resumed", start="PT1S", discarded="PT0S")
    link.audio(stereo_call([(0.0, 1.0)], [], 1.5))
    link.send("close", reason="end")
    # One cut, at the first pause (less the few ms the resampler holds back).
    assert [o for _, o, _ in spans_of(link)] == pytest.approx([0.2, 1.0], abs=0.1)
    assert link.kinds[-1] == "closed"


def test_an_update_ends_the_utterances_in_progress_on_both_channels() -> None:
    link = opened_link()
    call = stereo_call([(0.2, 3.0)], [(0.5, 3.0)], 4.0)
    link.audio(call[: 2 * 2 * RATE])
    link.send("update", language="en-US")  # the same language: only the cut
    assert [type(c).__name__ for c in link.commands[-1:]] == ["Cut"]
    link.audio(call[2 * 2 * RATE :])
    link.send("close", reason="end")
    spans = sorted(spans_of(link))
    assert [c for c, _, _ in spans] == [0, 0, 1, 1]
    # Each utterance ended at the update, and the speech after it began there (less the
    # few ms the resampler holds back).
    assert [o for _, o, _ in spans] == pytest.approx([0.2, 2.0, 0.5, 2.0], abs=0.06)
    assert [o + d for _, o, d in spans] == pytest.approx([2.0, 3.0, 2.0, 3.0], abs=0.06)


def test_an_update_with_a_new_language_cuts_first() -> None:
    link = opened_link()
    link.audio(stereo_call([(0.2, 2.0)], [], 1.0))
    link.send("update", language="ja-JP")
    cut, configure = link.commands[-2:]
    assert type(cut).__name__ == "Cut" and isinstance(configure, Configure)
    assert configure.options.language == "ja"


def test_a_pause_beyond_the_fill_is_skipped_and_offsets_still_count_it() -> None:
    link = opened_link()
    link.audio(stereo_call([(0.2, 0.6)], [], 1.0))
    link.send("paused")
    link.now += 100.0
    link.send("resumed", start="PT1S", discarded="PT100S")
    assert len(link.audio_sent()) == 2 * RATE * (1 + MAX_FILL_S)
    link.audio(stereo_call([(0.5, 1.0)], [], 1.5))
    link.send("close", reason="end")
    offsets = [t["offset"] for t in link.transcripts()]
    assert offsets == ["PT0.2S", "PT101.5S"]
    finals = [e for e in link.events if isinstance(e, Final) and e.transcript.text]
    assert finals[1].start_ms == (1 + MAX_FILL_S) * 1000 + 500  # the rest was skipped


def test_a_pause_before_any_audio_is_skipped() -> None:
    link = opened_link()
    link.send("paused")
    link.send("resumed", start="PT0S", discarded="PT3S")
    assert link.audio_sent() == b""
    link.audio(stereo_call([(0.4, 1.0)], [], 1.5))
    link.send("close", reason="end")
    assert [t["offset"] for t in link.transcripts()] == ["PT3.4S"]


def test_a_resume_that_dropped_nothing_fills_nothing() -> None:
    link = opened_link()
    link.audio(stereo_call([], [], 1.0))
    before = len(link.audio_sent())
    link.send("paused")
    link.send("resumed", start="PT1S", discarded="PT0S")
    link.send("resumed", start="PT1S", discarded="PT9S")  # not paused: ignored
    assert len(link.audio_sent()) == before
    assert link.close_code is None


def test_a_discard_moves_positions_without_inserting_audio() -> None:
    link = opened_link()
    # Genesys' API test: `discarded` at 2 s, but the client goes on sending the call whole.
    call = stereo_call([(0.5, 3.5)], [(4.0, 4.5)], 5.0)
    link.audio(call[: 2 * 2 * RATE])
    link.send("discarded", start="PT2S", discarded="PT0.5S")
    assert link.commands[-1] == Audio(call[2 * 2 * RATE - FRAME : 2 * 2 * RATE])  # nothing new
    link.audio(call[2 * 2 * RATE :])
    link.send("close", reason="end")
    # One utterance, kept whole, as long as the audio heard; the utterances after the
    # discard count the discarded 0.5 s.
    assert spans_of(link) == [(0, 0.5, 3.0), (1, 4.5, 0.5)]
    link2 = opened_link()
    link2.send("discarded", start="PT2S", discarded="0.5")
    disconnected(link2, "discarded: discarded must be a duration")


def test_repeated_discards_add_no_audio() -> None:
    link = opened_link()
    link.audio(stereo_call([], [], 1.0))
    sent = len(link.audio_sent())
    for k in range(1, 50):
        link.send("discarded", start=f"PT{k}S", discarded="PT100S")
    assert len(link.audio_sent()) == sent and link.close_code is None


def test_repeated_pauses_are_held_to_the_sessions_audio_pace() -> None:
    # Fill is audio to the session's meter (2x real time and a 5 s burst here), so a client
    # repeating pauses is paced as one sending audio too fast: its next message is not
    # read before the meter allows (the connection waits for `resume_at`).
    link = opened_link()
    link.audio(stereo_call([], [], 1.0))  # first audio at 0.1 s, now 1.0 s
    link.send("paused")
    link.send("resumed", start="PT1S", discarded="PT100S")
    assert len(link.audio_sent()) == 2 * RATE * (1 + MAX_FILL_S) and link.close_code is None
    assert link.core.resume_at <= link.now  # 4 s in 0.9 s: within the 5 s burst
    link.send("paused")
    link.send("resumed", start="PT101S", discarded="PT100S")  # 7 s of audio in 0.9 s
    assert link.close_code is None and "disconnect" not in link.kinds
    assert len(link.audio_sent()) == 2 * RATE * (1 + 2 * MAX_FILL_S)
    # 7 s counted from 0.1 s (less the resampler's delay), 5 s of burst: the rest at 2x,
    # so the next message is not read before about 1.1 s, after now.
    assert link.core.resume_at > link.now
    assert link.core.resume_at == pytest.approx(0.1 + (7 - 5) / 2, abs=0.05)


def test_resumed_needs_its_durations() -> None:
    link = opened_link()
    link.send("paused")
    link.send("resumed", start="PT0S")
    disconnected(link, "resumed: discarded must be a duration")


# ---- close, closed, disconnect ---------------------------------------------------------


def test_closed_goes_out_only_after_every_owed_final() -> None:
    link = opened_link()
    link.hold = True  # the engine has not answered yet
    link.audio(stereo_call([(0.2, 1.0)], [(0.5, 2.0)], 2.0))  # the customer still talks
    link.send("close", reason="end")
    assert Stop() in link.commands and "closed" not in link.kinds
    link.release()
    assert link.kinds[-1] == "closed" and link.kinds.count("event") == 2
    assert isinstance(link.events[-1], Ended)
    assert link.of("closed")[0]["parameters"] == {}


def test_close_before_open_is_closed() -> None:
    link = Link({"audiohook-session-id": SID})
    link.send("close", reason="error")
    assert link.kinds == ["closed"] and link.close_code is None


def test_after_close_messages_change_nothing_and_audio_disconnects() -> None:
    link = opened_link()
    link.hold = True
    link.audio(stereo_call([(0.2, 2.0)], [], 1.0))
    link.send("close", reason="end")
    link.send("ping")
    link.send("update", language="ko-KR")
    link.send("close", reason="end")
    assert len(link.configures()) == 1 and link.commands.count(Stop()) == 1
    link.receive(b"\xff" * FRAME)
    assert link.kinds == ["opened", "disconnect"]
    link.release()  # the owed final still goes out; no `closed` follows the disconnect
    assert link.kinds == ["opened", "disconnect", "event"]
    assert isinstance(link.events[-1], Ended)


def test_a_close_with_an_unknown_reason_disconnects() -> None:
    link = opened_link()
    link.send("close", reason="bored")
    disconnected(link, "close: reason must be one of end, error, disconnect, reconnect")


def test_a_server_shutdown_is_a_completed_disconnect_after_the_owed_finals() -> None:
    link = opened_link()
    link.hold = True
    link.audio(stereo_call([(0.2, 2.0)], [], 1.0))  # speech still open: a final is owed
    link.core.end_of_stream(link.now)  # the server drains the session
    link.release()
    assert link.kinds == ["opened", "event", "disconnect"]
    assert link.messages[-1]["parameters"] == {
        "reason": "completed",
        "info": "the server is shutting down",
    }
    assert link.close_code is None and isinstance(link.events[-1], Ended)


def test_a_server_shutdown_while_closing_answers_the_close() -> None:
    link = opened_link()
    link.hold = True
    link.audio(stereo_call([(0.2, 2.0)], [], 1.0))
    link.send("close", reason="end")
    link.core.end_of_stream(link.now)
    link.release()
    assert link.kinds == ["opened", "event", "closed"]


def test_one_disconnect_per_session() -> None:
    codec = AudioHookCodec(SessionLimits(), SID)
    first = codec.encode(ErrorEvent("server_full", "too many sessions"))
    assert json.loads(first[0])["parameters"]["info"] == "too many sessions"
    assert codec.encode(ErrorEvent("internal_error", "again")) == ()
    assert codec.encode(Ended()) == ()  # neither a second disconnect nor a `closed`


def test_an_unauthorized_error_is_a_disconnect_for_that_reason() -> None:
    codec = AudioHookCodec(SessionLimits(), SID)
    (frame,) = codec.encode(ErrorEvent("unauthorized", "wrong key"))
    assert json.loads(frame)["parameters"]["reason"] == "unauthorized"


def test_the_codec_is_fatal_on_every_error_and_waits_for_the_client_to_close() -> None:
    codec = AudioHookCodec(SessionLimits(), SID)
    assert codec.is_fatal(InvalidFieldError("x"))
    assert codec.close_code(InvalidFieldError("x")) == CLOSE_POLICY_VIOLATION
    assert codec.end_grace_s > 0 and codec.opening() == ()
    assert codec.max_message_bytes >= MAX_TEXT_BYTES


def test_a_bad_session_id_header_refuses_the_handshake() -> None:
    handshake = Handshake(headers={"audiohook-session-id": "session-1"})
    with pytest.raises(InvalidFieldError, match="Audiohook-Session-Id must be a UUID"):
        make_audiohook_codec(handshake, CodecSettings())
    assert make_audiohook_codec(Handshake(), CodecSettings()).max_message_bytes > 0


# ---- durations and the timeline --------------------------------------------------------


@pytest.mark.parametrize(
    ("ms", "text"), [(0, "PT0S"), (20, "PT0.02S"), (1500, "PT1.5S"), (3000, "PT3S"), (-5, "PT0S")]
)
def test_durations_are_written_in_seconds(ms: int, text: str) -> None:
    assert format_duration(ms) == text


@pytest.mark.parametrize(
    ("text", "samples"),
    [("PT0S", 0), ("PT1.5S", 12000), ("PT.5S", 4000), ("PT6.3S", 50400), ("PT0.0001S", 1)],
)
def test_durations_are_read_as_samples(text: str, samples: int) -> None:
    assert duration_field({"d": text}, "d") == samples


@pytest.mark.parametrize("text", ["P1D", "PT1M", "PT1.S", "pt1s", "PT1e3S", "PT9999999S", 5])
def test_other_durations_are_refused(text: Any) -> None:
    with pytest.raises(InvalidFieldError):
        duration_field({"d": text}, "d")


def test_the_timeline_maps_stream_times_past_skipped_gaps() -> None:
    timeline = Timeline(max_fill=2 * RATE)
    assert timeline.close_gap(5 * RATE) == 0  # nothing on the stream yet: all skipped
    timeline.advance(RATE)
    assert timeline.position == 6 * RATE
    assert timeline.close_gap(6 * RATE - 100) == 0  # behind: nothing
    assert timeline.close_gap(7 * RATE) == RATE  # within the fill
    assert timeline.close_gap(12 * RATE) == 2 * RATE  # 5 s gap: 2 filled, 3 skipped
    assert (timeline.samples, timeline.skipped) == (4 * RATE, 8 * RATE)
    assert [timeline.position_ms(ms) for ms in (0, 999, 3999, 4000, 5000)] == [
        5000,
        5999,
        8999,
        12000,
        13000,
    ]
    assert timeline.close_gap(13 * RATE, fill_ok=False) == 0  # a discard: all skipped
    assert (timeline.samples, timeline.skipped) == (4 * RATE, 9 * RATE)
    assert timeline.position_ms(4000) == 13000


def test_media_choice_prefers_stereo_whatever_the_order() -> None:
    mono, stereo = Media(("internal",)), Media(("internal", "external"))
    assert choose_media([mono, stereo]) == stereo
    assert choose_media([Media(("external",), "L16"), mono]) == mono
    assert choose_media([Media(("external",), rate=16000)]) is None
