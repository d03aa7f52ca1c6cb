"""OpenAI's file API, sans-I/O: form fields to a job, finals to every response format."""

from __future__ import annotations

import json

import pytest

from engine.types import Token, Transcript
from streaming.events import Final
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
