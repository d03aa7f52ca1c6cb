"""Upload slots and length caps of `POST /v1/audio/transcriptions` (issue 32, items 1-2).

The app runs in this process; aborted requests are driven through its ASGI entry point
with a `receive` that says the client left, so each one has ended, deterministically,
before the next request is made. Whether its slot came back shows to an ordinary client:
with `max_uploads=1` a leaked slot answers the next upload with 429.
"""

from __future__ import annotations

import asyncio
import io
import json
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from starlette.requests import ClientDisconnect

from server.app import App
from server.http.tables import main_app
from tests.server.inprocess import serving
from tests.speech import Clip

SR = 16000
BOUNDARY = "sensestream-test-boundary"
Message = dict[str, Any]


def multipart(audio: bytes, filename: str, **fields: str) -> bytes:
    parts = [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        for name, value in {"model": "whisper-1", **fields}.items()
    ]
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    )
    return "".join(parts).encode() + head.encode() + audio + f"\r\n--{BOUNDARY}--\r\n".encode()


def flac(samples: np.ndarray) -> bytes:
    out = io.BytesIO()
    sf.write(out, samples, SR, format="FLAC")
    return out.getvalue()


def scope(body: bytes) -> Message:
    headers = [
        (b"content-type", f"multipart/form-data; boundary={BOUNDARY}".encode()),
        (b"content-length", str(len(body)).encode()),
        (b"host", b"127.0.0.1"),
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/audio/transcriptions",
        "raw_path": b"/v1/audio/transcriptions",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }


def receiving(chunks: list[bytes]) -> Callable[[], Awaitable[Message]]:
    """The client sends `chunks`, then is gone."""
    queue: list[Message] = [
        {"type": "http.request", "body": chunk, "more_body": True} for chunk in chunks
    ]

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        return {"type": "http.disconnect"}

    return receive


async def send_nowhere(message: Message) -> None:
    raise OSError("the client's socket is gone")  # uvicorn's send once a peer has left


async def abort_mid_body(app: App, body: bytes) -> None:
    """Half the body, then a disconnect: Starlette raises ClientDisconnect into the route."""
    receive = receiving([body[: len(body) // 2]])
    with pytest.raises((OSError, ClientDisconnect)):
        await main_app(app)(scope(body), receive, send_nowhere)


async def abort_before_stream(app: App, body: bytes) -> None:
    """The whole body, then a client gone before the SSE answer's first byte."""
    receive = receiving([body])
    with pytest.raises((OSError, ClientDisconnect)):
        await main_app(app)(scope(body), receive, send_nowhere)


def post(port: int, body: bytes) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/audio/transcriptions",
        data=body,
        headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", maxsplit=1)[0])


@pytest.fixture(scope="module")
def speech(speech_clips: list[Clip]) -> np.ndarray:
    return np.concatenate([speech_clips[0].audio, np.zeros(SR // 2, np.float32)])


@pytest.fixture(scope="module")
def answers(tiny_model_dir: Path, speech: np.ndarray) -> Iterator[dict[str, Any]]:
    """One server that runs one upload at a time; aborted uploads, then ordinary ones."""

    async def scenario() -> dict[str, Any]:
        async with serving(tiny_model_dir, max_uploads=1) as (app, url):
            port = port_of(url)
            ok = multipart(flac(speech), "speech.flac")
            out: dict[str, Any] = {}
            for _ in range(3):
                await abort_mid_body(app, ok)
            out["after_mid_body"] = await asyncio.to_thread(post, port, ok)
            for _ in range(3):
                await abort_before_stream(app, multipart(flac(speech), "s.flac", stream="true"))
            out["after_stream"] = await asyncio.to_thread(post, port, ok)
            out["running"] = app.file_api._running
            return out

    yield asyncio.run(scenario())


@pytest.fixture(scope="module")
def capped(tiny_model_dir: Path, speech: np.ndarray) -> Iterator[dict[str, Any]]:
    """A server that takes 20 s of audio at most: a longer file, then an ordinary one."""

    async def scenario() -> dict[str, Any]:
        async with serving(tiny_model_dir, max_upload_seconds=20.0) as (_, url):
            port = port_of(url)
            long = multipart(flac(np.zeros(30 * SR, np.float32)), "silence.flac")
            too_long = await asyncio.to_thread(post, port, long)
            ok = await asyncio.to_thread(post, port, multipart(flac(speech), "speech.flac"))
            return {"too_long": too_long, "after_too_long": ok}

    yield asyncio.run(scenario())


def test_an_upload_cut_off_mid_body_gives_its_slot_back(answers: dict[str, Any]) -> None:
    status, body = answers["after_mid_body"]
    assert status == 200, body
    assert body["text"]


def test_a_streamed_answer_never_started_gives_its_slot_back(answers: dict[str, Any]) -> None:
    status, body = answers["after_stream"]
    assert status == 200, body


def test_audio_over_the_length_cap_is_refused_with_413(capped: dict[str, Any]) -> None:
    status, body = capped["too_long"]
    assert status == 413
    assert body["error"]["code"] == "audio_too_long"
    assert body["error"]["param"] == "file"
    assert "20 s" in body["error"]["message"]
    assert capped["after_too_long"][0] == 200


def test_no_slot_is_held_once_every_request_has_ended(answers: dict[str, Any]) -> None:
    assert answers["running"] == 0
