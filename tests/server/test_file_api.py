"""OpenAI's file API on a real server, through the official `openai` SDK, unchanged.

The server runs in this process on the tiny random-weight model; texts are meaningless but
deterministic, so a file's transcript is compared with protocol v1's finals for the same
audio: one pipeline, so the same utterances and the same texts.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from openai import APIStatusError, OpenAI

from sensestream.client import run_session
from tests.server.served import served
from tests.speech import Clip, three_sentences, to_s16le

SR = 16000
KEY = "file-api-test-key-0123456789"


@pytest.fixture(scope="module")
def speech(speech_clips: list[Clip]) -> np.ndarray:
    return np.concatenate([three_sentences(speech_clips), np.zeros(SR, np.float32)])


@pytest.fixture(scope="module")
def wav(speech: np.ndarray, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("upload") / "speech.wav"
    sf.write(path, np.frombuffer(to_s16le(speech), "<i2"), SR, subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def live(
    tiny_model_dir: Path, speech: np.ndarray, wav: Path, workers: str
) -> Iterator[dict[str, Any]]:
    """A server with keys; everything asked of it in one run (the model loads once)."""

    async def scenario() -> dict[str, Any]:
        options = {"api_keys": KEY, "max_upload_bytes": 4 << 20}
        async with served(tiny_model_dir, workers, **options) as url:
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            v1 = await run_session(url, to_s16le(speech), speed=50.0, headers=auth())
            answers = await asyncio.to_thread(ask_everything, port, wav)
            finals = [e for e in v1.of("final") if e["text"]]
            return {"v1": [e["text"] for e in finals], "v1_finals": finals, **answers}

    yield asyncio.run(scenario())


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}"}


def ask_everything(port: int, wav: Path) -> dict[str, Any]:
    client = OpenAI(api_key=KEY, base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    out: dict[str, Any] = {"models": [m.id for m in client.models.list().data]}
    for fmt in ("json", "text", "srt", "vtt"):
        with wav.open("rb") as f:
            out[fmt] = client.audio.transcriptions.create(
                file=f, model="whisper-1", response_format=fmt
            )
    with wav.open("rb") as f:
        out["verbose"] = client.audio.transcriptions.create(
            file=f,
            model="whisper-1",
            response_format="verbose_json",
            timestamp_granularities=["word", "segment"],
        )
    with wav.open("rb") as f:
        out["logprobs"] = client.audio.transcriptions.create(
            file=f, model="whisper-1", response_format="json", include=["logprobs"]
        )
    with wav.open("rb") as f:
        stream = client.audio.transcriptions.create(file=f, model="whisper-1", stream=True)
        out["stream"] = [
            (e.type, getattr(e, "delta", None) or getattr(e, "text", "")) for e in stream
        ]
    out["errors"] = errors(client, port, wav)
    return out


def errors(client: OpenAI, port: int, wav: Path) -> dict[str, tuple[int, str | None]]:
    found: dict[str, tuple[int, str | None]] = {}
    cases: dict[str, dict[str, Any]] = {
        "bad_format": {"file": wav.open("rb"), "response_format": "xml"},
        "bad_language": {"file": wav.open("rb"), "language": "fr"},
        "not_audio": {"file": ("notes.wav", b"these are not samples" * 100)},
        "too_big": {"file": ("big.wav", b"\0" * (5 << 20))},
        "logprobs_not_json": {
            "file": wav.open("rb"),
            "response_format": "verbose_json",
            "include": ["logprobs"],
        },
    }
    for name, kwargs in cases.items():
        try:
            client.audio.transcriptions.create(model="whisper-1", **kwargs)
        except APIStatusError as exc:
            body = exc.body if isinstance(exc.body, dict) else {}
            found[name] = (exc.status_code, body.get("param"))
    stranger = OpenAI(api_key="wrong-key", base_url=client.base_url, max_retries=0)
    try:
        stranger.models.list()
    except APIStatusError as exc:
        found["no_key"] = (exc.status_code, None)
    found["not_multipart"] = raw_post(port, b"{}", "application/json")
    return found


def raw_post(port: int, body: bytes, content_type: str) -> tuple[int, str | None]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/audio/transcriptions",
        data=body,
        headers={"Content-Type": content_type, **auth()},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())["error"]["param"]


def test_models_lists_the_served_model_and_openai_names(live: dict[str, Any]) -> None:
    assert "whisper-1" in live["models"] and len(live["models"]) >= 2


def test_json_and_text_carry_the_same_finals_as_protocol_v1(live: dict[str, Any]) -> None:
    assert len(live["v1"]) >= 2
    assert live["json"].text == " ".join(live["v1"])
    assert live["text"].strip() == " ".join(live["v1"])


def test_subtitles_have_one_cue_per_final(live: dict[str, Any]) -> None:
    srt, vtt = live["srt"], live["vtt"]
    assert srt.startswith("1\n00:00:") and " --> " in srt
    assert vtt.startswith("WEBVTT\n\n00:00:")
    assert srt.count(" --> ") == vtt.count(" --> ") == len(live["v1"])
    for text in live["v1"]:
        assert text in srt and text in vtt


def test_verbose_json_has_segments_and_words_in_time_order(live: dict[str, Any]) -> None:
    verbose = live["verbose"]
    segments = verbose.segments
    assert [s.text for s in segments] == live["v1"]
    assert all(a.end <= b.start for a, b in itertools.pairwise(segments))
    assert 0 <= segments[0].start < segments[-1].end <= verbose.duration + 0.01
    words = verbose.words
    assert words and all(w.start <= w.end for w in words)
    assert [w.start for w in words] == sorted(w.start for w in words)
    assert segments[0].start <= words[0].start and words[-1].end <= segments[-1].end + 0.01


def test_include_logprobs_gives_tokens_that_join_to_the_text(live: dict[str, Any]) -> None:
    answer = live["logprobs"]
    assert answer.text == " ".join(live["v1"]) and answer.logprobs
    assert "".join(lp.token for lp in answer.logprobs) == answer.text
    assert all(lp.logprob is not None and lp.logprob <= 0 for lp in answer.logprobs)
    assert all(bytes(int(b) for b in lp.bytes) == lp.token.encode() for lp in answer.logprobs)
    assert live["json"].logprobs is None  # only when included


def test_scores_are_real_in_verbose_json_and_v1(live: dict[str, Any]) -> None:
    segments = live["verbose"].segments
    assert all(s.avg_logprob < 0 and 0 <= s.no_speech_prob <= 1 for s in segments)
    for final in live["v1_finals"]:  # the server scores every final by default
        assert 0 < final["confidence"] <= 1
        assert all(0 < w["confidence"] <= 1 for w in final["words"])
        assert min(w["confidence"] for w in final["words"]) <= final["confidence"]


def test_streaming_sends_deltas_then_done(live: dict[str, Any]) -> None:
    events = live["stream"]
    kinds = [kind for kind, _ in events]
    assert kinds[-1] == "transcript.text.done" and kinds.count("transcript.text.done") == 1
    deltas = [text for kind, text in events if kind == "transcript.text.delta"]
    assert len(deltas) == len(live["v1"])
    assert "".join(deltas) == events[-1][1] == " ".join(live["v1"])


def test_bad_requests_get_openai_error_objects(live: dict[str, Any]) -> None:
    errors = live["errors"]
    assert errors["bad_format"] == (400, "response_format")
    assert errors["bad_language"] == (400, "language")
    assert errors["not_audio"] == (415, "file")
    assert errors["too_big"] == (413, "file")
    assert errors["no_key"] == (401, None)
    assert errors["not_multipart"] == (415, "file")
    assert errors["logprobs_not_json"] == (400, "include[]")
