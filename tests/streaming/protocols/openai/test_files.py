"""OpenAI's file API, sans-I/O: form fields to a job, finals to every response format."""

from __future__ import annotations

import base64
import json
from dataclasses import replace

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
def test_bad_fields_are_400_with_the_param(fields: dict, param: str) -> None:
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
