"""What a new user trips over (issue 38): unknown WebSocket paths, refusals, close reasons.

An upgrade at a path that streams nothing is a 404 that lists the paths that do; every
refused handshake leaves one INFO line naming the peer, the path and the status; a stream
that an error ended says which in its close reason.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from server.live.socket_port import MAX_REASON_BYTES, close_reason
from tests.server.inprocess import serving

KEY = "refusals-key-0123456789abcdef"
TIMEOUT_S = 120.0
LOGGER = "sensestream.server"


def run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(scenario, TIMEOUT_S))


async def refused(url: str, **kwargs: Any) -> tuple[int, str]:
    """The status and body that refused the upgrade (the test fails if it was accepted)."""
    try:
        async with connect(url, open_timeout=30, **kwargs):
            pass
    except InvalidStatus as exc:
        return exc.response.status_code, exc.response.body.decode()
    raise AssertionError(f"{url} was accepted")


async def closed(url: str, *messages: str) -> tuple[int | None, str | None]:
    """Send `messages`, read until the server closes: its close code and reason."""
    async with connect(url, open_timeout=30) as ws:
        for message in messages:
            await ws.send(message)
        with pytest.raises(ConnectionClosed):
            while True:
                await ws.recv()
        return ws.close_code, ws.close_reason


async def http_get(url: str) -> tuple[int, str]:
    """A plain GET, off the loop (the server under test runs on it)."""

    def get() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    return await asyncio.to_thread(get)


def refusal_lines(caplog: pytest.LogCaptureFixture, path: str) -> list[str]:
    """The INFO lines that report a refused handshake at `path`."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER
        and r.levelno == logging.INFO
        and r.getMessage().startswith(f"refused WebSocket {path} ")
    ]


def test_an_unknown_websocket_path_is_a_404_that_lists_the_streaming_paths(
    tiny_model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def scenario() -> None:
        async with serving(tiny_model_dir) as (_, url):
            base = url.removesuffix("/ws")
            for path in ("/asr", "/ws/"):
                status, body = await refused(base + path)
                assert status == 404, body
                assert body.startswith(f"no streaming endpoint at {path};"), body
                listed = body.split("streaming paths: ", 1)[1]
                assert "/ws (v1)" in listed and "/funasr (funasr)" in listed, body
                assert "/v1/streams/{stream_id}/events (follow)" in listed, body
            # A plain GET there is still the page's 404, and `/` still speaks FunASR.
            http = base.replace("ws://", "http://")
            assert await http_get(http + "/asr") == (404, "not found: /asr\n")
            async with connect(base + "/", open_timeout=30):
                pass

    run(scenario())
    for path in ("/asr", "/ws/"):
        lines = refusal_lines(caplog, path)
        assert len(lines) == 1, caplog.text
        assert "from 127.0.0.1: 404 no streaming endpoint at" in lines[0], lines


def test_a_refused_handshake_is_logged_with_the_peer_and_status(
    tiny_model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def scenario() -> None:
        async with serving(tiny_model_dir, api_keys=KEY) as (_, url):
            assert (await refused(url + "?token=wrong-key-0123456789"))[0] == 401
            evil = {"Origin": "https://evil.example"}
            status, _ = await refused(url + f"?token={KEY}", additional_headers=evil)
            assert status == 403
            follow = url.removesuffix("/ws") + f"/v1/streams/gone/events?token={KEY}"
            assert (await refused(follow))[0] == 404  # no such live stream

    run(scenario())
    lines = refusal_lines(caplog, "/ws")
    assert len(lines) == 2, caplog.text
    assert "from 127.0.0.1: 401 missing or wrong API key" in lines[0], lines
    assert "from 127.0.0.1: 403 origin not allowed" in lines[1], lines
    # The key rides in the query string, which the log line leaves out.
    assert not any(KEY in line for line in lines)
    (follow,) = refusal_lines(caplog, "/v1/streams/gone/events")
    assert "from 127.0.0.1: 404 no live stream 'gone'" in follow


def test_an_error_close_names_the_error_and_a_clean_end_does_not(tiny_model_dir: Path) -> None:
    async def scenario() -> None:
        async with serving(tiny_model_dir) as (_, url):
            assert await closed(url, "{this is not json") == (1007, "error: malformed_json")
            bad_rate = json.dumps({"type": "start", "sample_rate": 12345})
            assert await closed(url, bad_rate) == (1008, "error: invalid_field")
            start, stop = json.dumps({"type": "start"}), json.dumps({"type": "stop"})
            assert await closed(url, start, stop) == (1000, "end of stream")

    run(scenario())


def test_a_close_reason_fits_a_close_frame() -> None:
    assert close_reason(None) == "end of stream"
    assert close_reason("audio_too_long") == "error: audio_too_long"
    long = close_reason("é" * 200)  # two bytes each: the cut must not split one
    assert len(long.encode()) <= MAX_REASON_BYTES
    assert long.startswith("error: é")
