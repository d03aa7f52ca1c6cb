"""Limits and access control on a real server: each refusal is typed, others go on."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from sensestream.client import run_session
from tests.server.conftest import ServerProcess
from tests.speech import Clip, to_s16le

KEY = "test-key-0123456789abcdef"
SR = 16000


@pytest.fixture(scope="module")
def guarded(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tiny_model_dir,
        "--max-sessions",
        "3",
        "--max-sessions-per-ip",
        "2",
        "--max-frame-bytes",
        "8192",
        "--idle-timeout-s",
        "1.5",
        "--api-keys",
        KEY,
        "--protect-metrics",
        "--allowed-origins",
        "https://captions.example",
        "--metrics-port",
        "0",
    )
    proc.ops_port = int(  # type: ignore[attr-defined]
        re_port(proc.log, "operational endpoints on")
    )
    yield proc
    proc.stop()


def re_port(lines: list[str], marker: str) -> str:
    for line in lines:
        if marker in line:
            return line.rsplit(":", 1)[1].strip()
    raise AssertionError(f"no {marker!r} line")


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}"}


def speech(clips: list[Clip]) -> bytes:
    audio = np.concatenate(
        [np.zeros(SR // 2, np.float32), clips[1].audio, np.zeros(SR, np.float32)]
    )
    return to_s16le(audio)


async def expect_status(url: str, **kwargs: object) -> int:
    try:
        async with connect(url, **kwargs):  # type: ignore[arg-type]
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


def test_api_key_is_required_and_checked(guarded: ServerProcess, speech_clips: list[Clip]) -> None:
    assert asyncio.run(expect_status(guarded.url)) == 401
    bad = {"Authorization": "Bearer wrong-key-0123456789"}
    assert asyncio.run(expect_status(guarded.url, additional_headers=bad)) == 401
    assert asyncio.run(expect_status(guarded.url + "?token=nope")) == 401
    assert asyncio.run(expect_status(guarded.url + f"?token={KEY}")) == 101
    good = asyncio.run(run_session(guarded.url, speech(speech_clips), headers=auth()))
    assert good.of("final") and good.close_code == 1000


def test_browser_key_subprotocol_is_accepted_and_realtime_is_selected(
    guarded: ServerProcess,
) -> None:
    """OpenAI's browser clients cannot set headers: the key rides in a subprotocol."""

    async def offer(key: str) -> str | int | None:
        protocols = ["realtime", f"openai-insecure-api-key.{key}"]
        try:
            async with connect(guarded.url, subprotocols=protocols) as ws:  # type: ignore[arg-type]
                return ws.subprotocol
        except InvalidStatus as exc:
            return exc.response.status_code

    assert asyncio.run(offer(KEY)) == "realtime"
    assert asyncio.run(offer("wrong-key-0123456789")) == 401


def test_origin_allowlist(guarded: ServerProcess) -> None:
    evil = {**auth(), "Origin": "https://evil.example"}
    assert asyncio.run(expect_status(guarded.url, additional_headers=evil)) == 403
    fine = {**auth(), "Origin": "https://captions.example"}
    assert asyncio.run(expect_status(guarded.url, additional_headers=fine)) == 101


def test_metrics_need_the_key_and_live_on_their_own_port(guarded: ServerProcess) -> None:
    port = guarded.ops_port  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{port}/metrics"
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url, timeout=10)
    assert info.value.code == 401
    request = urllib.request.Request(url, headers=auth())
    with urllib.request.urlopen(request, timeout=10) as r:
        assert b"engine_requests_total" in r.read()
    assert guarded.http("/metrics")[0] == 404  # not on the public port
    assert guarded.http("/stats")[0] == 404
    assert guarded.http("/readyz")[0] == 200  # health stays where traffic is routed


def test_oversized_frame_is_refused_and_a_neighbour_is_unaffected(
    guarded: ServerProcess, speech_clips: list[Clip]
) -> None:
    async def both() -> tuple:
        healthy = run_session(guarded.url, speech(speech_clips), headers=auth(), speed=4.0)
        big = run_session(guarded.url, b"\x00" * 9000, headers=auth(), chunk=9000, stop=False)
        return await asyncio.gather(healthy, big)

    healthy, big = asyncio.run(both())
    assert big.of("error")[0]["code"] == "frame_too_large"
    assert big.close_code == 1009
    assert healthy.of("final") and healthy.close_code == 1000
    fresh = asyncio.run(run_session(guarded.url, speech(speech_clips), headers=auth()))
    assert fresh.of("final") and fresh.close_code == 1000


def test_idle_client_is_timed_out(guarded: ServerProcess) -> None:
    outcome = asyncio.run(
        run_session(guarded.url, b"\x00\x00" * 1600, headers=auth(), stop=False, linger=5.0)
    )
    assert outcome.of("error")[0]["code"] == "session_limit"
    assert outcome.close_code == 1008


def test_live_stream_faster_than_allowed_is_paced_not_refused(
    guarded: ServerProcess, speech_clips: list[Clip]
) -> None:
    audio = speech(speech_clips) * 2  # about 10 s, sent at once as a "live" stream
    outcome = asyncio.run(
        run_session(guarded.url, audio, headers=auth(), start={"type": "start"}, speed=0, pace=None)
    )
    assert outcome.of("error") == []
    assert outcome.close_code == 1000
    assert outcome.events[-1]["type"] == "end" and outcome.of("final")
    # Held to 2x real time after a 5 s burst: the last frame cannot have been read before
    # (10 s - 5 s) / 2 after the first, so the stream cannot have ended sooner.
    elapsed = outcome.times[-1] - outcome.started_at
    assert elapsed >= (len(audio) / 32000 - 5.0) / 2.0


def sessions_close(server: ServerProcess, deadline_s: float = 10.0) -> None:
    """Wait until the server has let go of every session (its count lags the client's close)."""
    url = f"http://127.0.0.1:{server.ops_port}/stats"  # type: ignore[attr-defined]
    give_up = time.monotonic() + deadline_s
    while True:
        with urllib.request.urlopen(urllib.request.Request(url, headers=auth()), timeout=5) as r:
            if json.loads(r.read())["sessions"] == 0:
                return
        if time.monotonic() > give_up:
            raise AssertionError("sessions still open on the server")
        time.sleep(0.05)


def test_session_caps_per_address_and_in_total(
    guarded: ServerProcess, speech_clips: list[Clip]
) -> None:
    sessions_close(guarded)  # earlier tests' sessions must not count against the caps

    async def scenario() -> tuple[list[dict], list[dict]]:
        holders = [await connect(guarded.url, additional_headers=auth()) for _ in range(2)]
        refused = await first_event(guarded.url, "127.0.0.1")
        other = await connect(guarded.url, additional_headers=auth(), local_addr=("127.0.0.2", 0))
        total = await first_event(guarded.url, "127.0.0.3")
        for ws in [*holders, other]:
            await ws.close()
        return refused, total

    per_ip, total = asyncio.run(scenario())
    assert per_ip[0]["code"] == "server_full" and per_ip[1] == 1013
    assert total[0]["code"] == "server_full" and "limit of 3" in total[0]["message"]
    sessions_close(guarded)
    after = asyncio.run(run_session(guarded.url, speech(speech_clips), headers=auth()))
    assert after.of("final")


async def first_event(url: str, host: str) -> list:
    async with connect(url, additional_headers=auth(), local_addr=(host, 0)) as ws:
        message = json.loads(await ws.recv())
        await ws.wait_closed()
        return [message, ws.close_code]
