"""OpenAI's file API, sans-I/O: form fields to a job, finals to every response format."""

from __future__ import annotations

import base64
import json
import math
from dataclasses import replace
from typing import Any

import pytest

from engine.types import Token, Transcript
from streaming.events import Final, SpeakerTurn
from streaming.protocols.openai.files import (
    FileApiError,
    TranscriptionJob,
    parse_fields,
    render,
    sse_delta,
    sse_done,
    sse_error,
    words,
)
from streaming.redaction.apply import redact
from streaming.redaction.detect import Found
from streaming.redaction.policies import Policy


def final(start_ms: int, end_ms: int, text: str, tokens: tuple[Token, ...] = ()) -> Final:
    return Final(0, start_ms, end_ms, Transcript(text, "en", "happy", "speech", True, text, tokens))


FINALS = [
    final(
        500,
        1700,
        "hello world",
        (Token(1, " hel", 0, 200), Token(2, "lo", 200, 400), Token(3, " world", 500, 900)),
    ),
    final(2000, 2300, ""),  # noise: no cue, no segment
    final(3_600_000 + 61_001, 3_600_000 + 62_500, "again"),
]


def test_fields_become_a_job_with_defaults() -> None:
    assert parse_fields({"model": ["whisper-1"]}) == TranscriptionJob("whisper-1")
    job = parse_fields(
        {
            "model": ["gpt-4o-transcribe"],
            "language": ["en"],
            "prompt": ["names: Ada"],
            "response_format": ["verbose_json"],
            "timestamp_granularities[]": ["word", "segment"],
            "stream": ["true"],
        }
    )
    assert job == TranscriptionJob(
        "gpt-4o-transcribe",
        "en",
        "names: Ada",
        "verbose_json",
        frozenset({"word", "segment"}),
        True,
    )


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({}, "model"),
        ({"model": ["m"], "response_format": ["xml"]}, "response_format"),
        ({"model": ["m"], "language": ["fr"]}, "language"),
        ({"model": ["m"], "timestamp_granularities[]": ["char"]}, "timestamp_granularities[]"),
        ({"model": ["m"], "timestamp_granularities[]": ["word"]}, "timestamp_granularities[]"),
        ({"model": ["m"], "stream": ["maybe"]}, "stream"),
        # A prompt too long, or listing too many phrases, is refused before it is read.
        ({"model": ["m"], "prompt": ["Say it. " * 3000]}, "prompt"),
        ({"model": ["m"], "prompt": [", ".join(f"w{i}" for i in range(1001))]}, "prompt"),
    ],
)
def test_bad_fields_are_400_with_the_param(fields: dict[str, list[str]], param: str) -> None:
    with pytest.raises(FileApiError) as info:
        parse_fields(fields)
    assert info.value.status == 400 and info.value.param == param
    body = info.value.body()["error"]
    assert body["type"] == "invalid_request_error" and body["param"] == param and body["message"]


def test_json_and_text() -> None:
    kind, body = render(TranscriptionJob("m"), FINALS, 3700.0)
    assert kind == "application/json"
    assert json.loads(body)["text"] == "hello world again"
    kind, body = render(TranscriptionJob("m", response_format="text"), FINALS, 1.0)
    assert kind.startswith("text/plain") and body == "hello world again\n"


def test_srt_and_vtt_cues_skip_empty_finals_and_count_hours() -> None:
    _, srt = render(TranscriptionJob("m", response_format="srt"), FINALS, 1.0)
    assert srt == (
        "1\n00:00:00,500 --> 00:00:01,700\nhello world\n\n"
        "2\n01:01:01,001 --> 01:01:02,500\nagain\n\n"
    )
    _, vtt = render(TranscriptionJob("m", response_format="vtt"), FINALS, 1.0)
    assert vtt.startswith("WEBVTT\n\n00:00:00.500 --> 00:00:01.700\nhello world\n")


def test_verbose_json_segments_words_and_extras() -> None:
    job = TranscriptionJob("m", response_format="verbose_json", granularities=frozenset({"word"}))
    out = json.loads(render(job, FINALS, 3662.5)[1])
    assert out["task"] == "transcribe" and out["language"] == "english"
    assert out["duration"] == 3662.5 and "segments" not in out
    assert out["words"][:2] == [
        {"word": "hello", "start": 0.5, "end": 0.9},
        {"word": "world", "start": 1.0, "end": 1.4},
    ]
    assert out["sensevoice"][0]["emotion"] == "happy"
    both = TranscriptionJob(
        "m", response_format="verbose_json", granularities=frozenset({"segment"})
    )
    segments = json.loads(render(both, FINALS, 1.0)[1])["segments"]
    assert [(s["id"], s["start"], s["end"], s["text"]) for s in segments] == [
        (0, 0.5, 1.7, "hello world"),
        (1, 3661.001, 3662.5, "again"),
    ]


def test_cjk_characters_are_words_of_their_own() -> None:
    tokens = (Token(1, "你", 0, 100), Token(2, "好", 100, 200), Token(3, " ok", 300, 400))
    assert [w["word"] for w in words(final(0, 500, "你好 ok", tokens))] == ["你", "好", "ok"]


def test_server_sent_events_frame_json() -> None:
    assert sse_delta("hi") == 'data: {"type":"transcript.text.delta","delta":"hi"}\n\n'
    done = json.loads(sse_done("hi there", 2.0)[6:])
    assert done == {
        "type": "transcript.text.done",
        "text": "hi there",
        "usage": {"type": "duration", "seconds": 2.0},
    }
    error = json.loads(sse_error(FileApiError(500, "boom"))[6:])
    assert error["error"]["type"] == "server_error"


def labelled(base: Final, speaker: str, *turns: SpeakerTurn) -> Final:
    return replace(base, speaker=speaker, speaker_turns=turns or (SpeakerTurn(speaker, 0, 1),))


def test_diarized_json_is_a_segment_per_speaker_turn_named_as_openai_names_them() -> None:
    job = parse_fields(
        {"model": ["gpt-4o-transcribe-diarize"], "response_format": ["diarized_json"]}
    )
    assert job.diarize is True and TranscriptionJob("whisper-1").diarize is None
    two = (SpeakerTurn("S2", 500, 1000), SpeakerTurn("S1", 1000, 1700))
    finals = [labelled(FINALS[0], "S1", *two), FINALS[1], labelled(FINALS[2], "S2")]
    content_type, body = render(job, finals, 3663.0)
    out = json.loads(body)
    assert content_type == "application/json" and out["task"] == "transcribe"
    assert out["text"] == "hello world again" and out["duration"] == 3663.0
    segments = [(s["speaker"], s["start"], s["end"], s["text"]) for s in out["segments"]]
    # S2 spoke first in the stream: "A"; the turn split falls between "hello" and "world".
    assert segments == [
        ("A", 0.5, 1.0, "hello"),
        ("B", 1.0, 1.7, "world"),
        ("A", 3661.001, 3662.5, "again"),
    ]
    assert all(s["type"] == "transcript.text.segment" for s in out["segments"])
    assert len({s["id"] for s in out["segments"]}) == 3
    # A known speaker keeps their name; the numbered ones are lettered.
    named = [labelled(FINALS[0], "agent"), labelled(FINALS[2], "S1")]
    out = json.loads(render(job, named, 9.0)[1])
    assert [s["speaker"] for s in out["segments"]] == ["agent", "A"]


def test_other_formats_carry_speakers_when_they_were_labelled() -> None:
    finals = [labelled(FINALS[0], "S1"), FINALS[1], labelled(FINALS[2], "S2")]
    verbose = json.loads(
        render(TranscriptionJob("m", response_format="verbose_json"), finals, 9)[1]
    )
    assert [s["speaker"] for s in verbose["segments"]] == ["S1", "S2"]
    vtt = render(TranscriptionJob("m", response_format="vtt"), finals, 9)[1]
    assert "<v S1>hello world" in vtt and "<v S2>again" in vtt
    srt = render(TranscriptionJob("m", response_format="srt"), finals, 9)[1]
    assert "[S1] hello world" in srt and "[S2] again" in srt
    plain = json.loads(render(TranscriptionJob("m", response_format="verbose_json"), FINALS, 9)[1])
    assert all("speaker" not in s for s in plain["segments"])


def test_known_speakers_pair_names_with_data_url_references() -> None:
    wav = base64.b64encode(b"RIFF....WAVE").decode()
    job = parse_fields(
        {
            "model": ["m"],
            "known_speaker_names[]": ["agent", "caller"],
            "known_speaker_references[]": [f"data:audio/wav;base64,{wav}", "data:,plain%20text"],
        }
    )
    assert job.known_speakers == (("agent", b"RIFF....WAVE"), ("caller", b"plain text"))
    assert job.diarize is True  # naming speakers means labelling them


@pytest.mark.parametrize(
    ("names", "refs", "param", "fragment"),
    [
        (["a"], [], "known_speaker_references[]", "pair up"),
        (["a", "b", "c", "d", "e"], ["data:,x"] * 5, "known_speaker_names[]", "at most 4"),
        (["a", "a"], ["data:,x"] * 2, "known_speaker_names[]", "each name once"),
        (["a"], ["https://example.com/a.wav"], "known_speaker_references[0]", "data URL"),
        (["a"], ["data:audio/wav;base64,@@@"], "known_speaker_references[0]", "base64"),
    ],
)
def test_bad_known_speakers_are_400_naming_the_field(
    names: list[str], refs: list[str], param: str, fragment: str
) -> None:
    fields = {"model": ["m"], "known_speaker_names[]": names, "known_speaker_references[]": refs}
    with pytest.raises(FileApiError) as caught:
        parse_fields(fields)
    assert caught.value.status == 400 and caught.value.param == param
    assert fragment in caught.value.message


def test_speaker_counts_are_this_servers_own_fields() -> None:
    job = parse_fields({"model": ["m"], "min_speakers": ["2"], "max_speakers": ["3"]})
    assert (job.min_speakers, job.max_speakers) == (2, 3) and job.diarize is True
    assert parse_fields({"model": ["m"]}).min_speakers is None
    for fields, param in (
        ({"min_speakers": ["0"]}, "min_speakers"),
        ({"max_speakers": ["two"]}, "max_speakers"),
        ({"max_speakers": ["33"]}, "max_speakers"),
        ({"min_speakers": ["3"], "max_speakers": ["2"]}, "min_speakers"),
    ):
        with pytest.raises(FileApiError) as caught:
            parse_fields({"model": ["m"], **fields})
        assert caught.value.status == 400 and caught.value.param == param


def test_speaker_names_and_counts_that_would_mislead_are_refused() -> None:
    for fields, param in (
        (
            {"known_speaker_names[]": ["S1"], "known_speaker_references[]": ["data:,x"]},
            "known_speaker_names[]",
        ),
        (
            {"known_speaker_names[]": ["Al", "Al "], "known_speaker_references[]": ["data:,x"] * 2},
            "known_speaker_names[]",
        ),
        ({"max_speakers": ["\u00b2"]}, "max_speakers"),
        ({"response_format": ["diarized_json"], "stream": ["true"]}, "stream"),
    ):
        with pytest.raises(FileApiError) as caught:
            parse_fields({"model": ["m"], **fields})
        assert caught.value.status == 400 and caught.value.param == param, fields


def test_letters_skip_a_known_speakers_name() -> None:
    job = TranscriptionJob("m", response_format="diarized_json")
    finals = [labelled(FINALS[0], "A"), labelled(FINALS[2], "S1")]
    out = json.loads(render(job, finals, 9.0)[1])
    assert [s["speaker"] for s in out["segments"]] == ["A", "B"]


# ---- logprobs and confidence -------------------------------------------------------------


def test_include_logprobs_is_taken_as_include_brackets_or_plain() -> None:
    for name in ("include[]", "include"):
        job = parse_fields({"model": ["m"], name: ["logprobs"]})
        assert job.logprobs is True and job.confidence is True, name
    streamed = parse_fields({"model": ["m"], "include[]": ["logprobs"], "stream": ["true"]})
    assert streamed.logprobs and streamed.stream
    plain = parse_fields({"model": ["m"]})
    assert plain.logprobs is False and plain.confidence is None  # the server's choice
    # verbose_json scores its segments (avg_logprob) without being asked.
    assert parse_fields({"model": ["m"], "response_format": ["verbose_json"]}).confidence is True


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"include[]": ["tokens"]}, "invalid_value"),
        ({"include": ["logprob"]}, "invalid_value"),
        ({"include[]": ["logprobs", "segments"]}, "invalid_value"),
        # Realtime's include value is no file API one.
        ({"include[]": ["item.input_audio_transcription.logprobs"]}, "invalid_value"),
        # As OpenAI's API, logprobs only with json.
        ({"include[]": ["logprobs"], "response_format": ["text"]}, None),
        ({"include[]": ["logprobs"], "response_format": ["verbose_json"]}, None),
        ({"include": ["logprobs"], "response_format": ["srt"]}, None),
        ({"include[]": ["logprobs"], "response_format": ["vtt"]}, None),
        ({"include[]": ["logprobs"], "response_format": ["diarized_json"]}, None),
    ],
)
def test_other_includes_and_logprobs_with_other_formats_are_400(
    fields: dict[str, list[str]], code: str | None
) -> None:
    with pytest.raises(FileApiError) as caught:
        parse_fields({"model": ["m"], **fields})
    error = caught.value
    assert (error.status, error.param, error.code) == (400, "include[]", code)
    body = error.body()["error"]
    assert body["type"] == "invalid_request_error" and body["param"] == "include[]"
    assert body["code"] == code and body["message"]


def scored(
    start_ms: int,
    end_ms: int,
    pieces: tuple[tuple[str, float | None], ...],
    no_speech_prob: float | None = None,
) -> Final:
    """A final of scored tokens, each 100 ms, whose text they spell."""
    tokens = tuple(
        Token(10 + k, text, 100 * k, 100 * k + 90, logprob=lp)
        for k, (text, lp) in enumerate(pieces)
    )
    text = "".join(t.text for t in tokens).strip()
    base = final(start_ms, end_ms, text, tokens)
    return replace(base, transcript=replace(base.transcript, no_speech_prob=no_speech_prob))


HELLO = scored(0, 1000, ((" hel", -0.1), ("lo", -0.3), (" world", -0.05)), no_speech_prob=0.02)
CARD_PIECES = ((" card", -0.2), (" 4111", -0.9), ("1111", -0.8), ("1111", -0.7), ("1111", -0.6))


def card_final() -> Final:
    """A final whose card number was redacted: " [PCI]" and three emptied tokens, none
    with a logprob (each would tell what was said)."""
    said = scored(2000, 3000, (*CARD_PIECES, (" ok", -0.4)))
    text = said.transcript.text
    assert text == "card 4111111111111111 ok"
    out = redact(text, said.transcript.tokens, [Found(5, 21, Policy.PCI)], False, (0, 600))
    assert out.text == "card [PCI] ok"
    return replace(said, transcript=replace(said.transcript, text=out.text, tokens=out.tokens))


def test_json_logprobs_join_to_its_text_across_finals_with_the_redacted_token_null() -> None:
    job = parse_fields({"model": ["m"], "include[]": ["logprobs"]})
    body = render(job, [HELLO, final(1500, 1800, ""), card_final()], 3.0)[1]
    out = json.loads(body)
    assert list(out) == ["text", "logprobs", "usage"]
    assert out["text"] == "hello world card [PCI] ok"
    entries = out["logprobs"]
    assert "".join(e["token"] for e in entries) == out["text"]
    assert [(e["token"], e["logprob"]) for e in entries] == [
        ("hel", -0.1),
        ("lo", -0.3),
        (" world", -0.05),
        (" card", -0.2),  # the second final's joining space leads its first token
        (" [PCI]", None),
        (" ok", -0.4),
    ]
    assert all(e["bytes"] == list(e["token"].encode()) for e in entries)
    assert "4111" not in body and "-0.9" not in body


def test_json_has_no_logprobs_without_the_include() -> None:
    out = json.loads(render(TranscriptionJob("m"), [HELLO, card_final()], 3.0)[1])
    assert list(out) == ["text", "usage"]


def verbose_json(*finals: Final) -> dict[str, Any]:
    job = TranscriptionJob(
        "m", response_format="verbose_json", granularities=frozenset({"segment", "word"})
    )
    out: dict[str, Any] = json.loads(render(job, finals, 9.0)[1])
    return out


def test_verbose_segments_have_the_mean_token_logprob_and_the_no_speech_prob() -> None:
    segments = verbose_json(HELLO, card_final(), FINALS[2])["segments"]
    assert [s["text"] for s in segments] == ["hello world", "card [PCI] ok", "again"]
    one, card, unscored = segments
    assert one["avg_logprob"] == pytest.approx((-0.1 - 0.3 - 0.05) / 3)
    assert one["no_speech_prob"] == 0.02
    # The redacted tokens count for nothing: the mean of the others.
    assert card["avg_logprob"] == pytest.approx((-0.2 - 0.4) / 2)
    assert card["no_speech_prob"] == 0.0  # not scored
    assert (unscored["avg_logprob"], unscored["no_speech_prob"]) == (0.0, 0.0)


def test_verbose_words_carry_the_least_confidence_of_their_tokens_when_scored() -> None:
    words_out = verbose_json(HELLO, card_final(), FINALS[0])["words"]
    texts = [w["word"] for w in words_out]
    assert texts == ["hello", "world", "card", "[PCI]", "ok", "hello", "world"]
    hello, world, card, pci, ok, *unscored = words_out
    assert hello["confidence"] == pytest.approx(math.exp(-0.3), abs=1e-4)  # "lo", not "hel"
    assert world["confidence"] == pytest.approx(math.exp(-0.05), abs=1e-4)
    assert card["confidence"] == pytest.approx(math.exp(-0.2), abs=1e-4)
    assert ok["confidence"] == pytest.approx(math.exp(-0.4), abs=1e-4)
    # A redacted word has none (its tokens' would tell of the value), nor an unscored one.
    assert "confidence" not in pci
    assert all("confidence" not in w for w in unscored)
    assert (hello["start"], hello["end"]) == (0.0, 0.19)


def test_server_sent_events_carry_logprobs_only_when_given() -> None:
    entries = [{"token": " hi", "logprob": -0.5, "bytes": [32, 104, 105]}]
    delta = json.loads(sse_delta(" hi", entries)[6:])
    assert delta == {"type": "transcript.text.delta", "delta": " hi", "logprobs": entries}
    assert "logprobs" not in json.loads(sse_delta(" hi")[6:])
    done = json.loads(sse_done("hi", 1.0, entries)[6:])
    assert list(done) == ["type", "text", "logprobs", "usage"] and done["logprobs"] == entries
    assert "logprobs" not in json.loads(sse_done("hi", 1.0)[6:])
    # An empty list is still the field: the client asked, nothing was said.
    assert json.loads(sse_done("", 1.0, [])[6:])["logprobs"] == []
