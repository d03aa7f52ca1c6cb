"""Start-up as a person sees it: port first, a clean log, long-polled readiness, live drain."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from starlette.requests import Request
from starlette.responses import Response
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from server import app as app_module
from server.app import App
from server.config import ServerConfig
from streaming.vad.types import VadModel
from tests.server.conftest import REPO, ServerProcess
from tests.speech import Clip, to_s16le

SR = 16000


def test_a_taken_port_is_a_one_line_error_before_the_model_loads(tiny_model_dir: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "server", "--model", str(tiny_model_dir), "--port", str(port)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        elapsed = time.monotonic() - started
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: cannot listen on 127.0.0.1:{port}: ")
    assert "in use" in lines[0]
    assert "sensestream.server" not in proc.stderr, "nothing was loaded"
    assert elapsed < 10


def test_log_says_listening_with_the_page_url_then_ready_with_no_chatter(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    # A fresh copy, so this start exports and quantises the model (the noisiest path).
    model = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
    for onnx in model.glob("*.onnx"):
        onnx.unlink()
    server = ServerProcess(model, "--precision", "int8", "--no-reuse-tuning")
    try:
        for _ in range(5):
            assert server.http("/healthz")[0] == 200
            assert server.http("/readyz")[0] == 200
        stats = json.loads(server.http("/stats")[1])
        log = "".join(server.log)
        status = server.stop()
    finally:
        server.stop()
    assert status == 0
    listening = log.index(f"listening on ws://127.0.0.1:{server.port}/ws")
    page = log.index(f"page: http://127.0.0.1:{server.port}/")
    assert max(listening, page) < log.index("ready in")
    for chatter in ("pre-processing", "quantiz", "Notice: ffmpeg", "connection rejected"):
        assert chatter not in log, chatter
    assert "GET /healthz" not in log and log.count("connection closed") == 0
    kinds = {"background": 0.0, "early": 0.0, "final": 0.0, "partial": 0.0}
    assert stats["batches"]["audio_s_by_kind"] == kinds


class GatedLoad:
    """The server's real VAD load, finished early and then held until the test says go."""

    def __init__(self, load: Callable[[ServerConfig], VadModel]) -> None:
        self.load = load
        self.reached = threading.Event()  # the engine is up; readiness waits on `go` alone
        self.go = threading.Event()

    def __call__(self, config: ServerConfig) -> VadModel:
        vad = self.load(config)
        self.reached.set()
        if not self.go.wait(120):
            raise TimeoutError("the test never let the load finish")
        return vad


async def get_text(http: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with http.get(url) as answer:
        return answer.status, await answer.text()


def test_readyz_long_poll_answers_when_the_model_is_ready(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = GatedLoad(app_module.make_vad)
    monkeypatch.setattr(app_module, "make_vad", gate)

    gauge: list[float | None] = []

    async def scenario() -> list[tuple[int, str]]:
        config = ServerConfig.from_options(model=str(tiny_model_dir), port=0, precision="fp32")
        app = App(config, dict(os.environ))
        # Told when the server has a long poll in hand: the route runs on to its wait
        # without yielding, so by the time this task runs again the poll is being held.
        held, readyz = asyncio.Event(), app.readyz

        async def noted(request: Request) -> Response:
            if "wait" in request.query_params:
                held.set()
            return await readyz(request)

        app.readyz = noted  # type: ignore[method-assign]
        ports: asyncio.Queue[int] = asyncio.Queue()
        serving = asyncio.create_task(app.serve(on_listening=ports.put_nowait))
        try:
            url = f"http://127.0.0.1:{await asyncio.wait_for(ports.get(), 60)}/readyz"
            await asyncio.to_thread(gate.reached.wait, 120)
            async with aiohttp.ClientSession() as http:
                answers = [await get_text(http, url)]
                gauge.append(app.registry.get_sample_value("server_ready"))
                poll = asyncio.create_task(get_text(http, url + "?wait=8"))
                await asyncio.wait_for(held.wait(), 30)
                assert not poll.done()
                gate.go.set()
                answers.append(await asyncio.wait_for(poll, 30))
                answers.append(await get_text(http, url))
                gauge.append(app.registry.get_sample_value("server_ready"))
        finally:
            gate.go.set()
            app.request_shutdown()
            await asyncio.wait_for(serving, 60)
        return answers

    answers = asyncio.run(scenario())
    # Not ready while loading, then the held poll itself turned into the 200.
    assert [status for status, _ in answers] == [503, 200, 200], answers
    assert answers[0][1] == "not ready: starting\n"
    assert gauge == [0.0, 1.0]  # server_ready follows /readyz (an alert rule reads it)


def test_sigterm_while_a_client_keeps_sending_gives_owed_finals_end_and_1001(
    tiny_model_dir: Path, speech_clips: list[Clip]
) -> None:
    server = ServerProcess(tiny_model_dir)
    speech = np.concatenate([np.zeros(SR // 2, np.float32), speech_clips[1].audio])
    audio = to_s16le(np.concatenate([speech, np.zeros(SR, np.float32), speech] * 3))
    events: list[dict[str, Any]] = []

    async def scenario() -> int | None:
        async with connect(server.url, compression=None) as ws:
            await ws.send(json.dumps({"type": "start"}))
            reader = asyncio.create_task(collect(ws, events))
            frame, sent, signalled = 3200, 0, False
            try:
                # Real time throughout: the client never learns of the shutdown and goes on.
                while sent < len(audio):
                    await ws.send(audio[sent : sent + frame])
                    sent += frame
                    await asyncio.sleep(0.1)
                    # One second into the second sentence (two bytes a sample).
                    if not signalled and sent > 2 * (len(speech) + 2 * SR + SR // 2):
                        server.terminate()
                        signalled = True
            except ConnectionClosed:
                pass  # the server closed after `end`; our late frames had nowhere to go
            await asyncio.wait_for(reader, 60)
            return ws.close_code

    try:
        close_code = asyncio.run(scenario())
        code = server.proc.wait(timeout=60)  # it exits by itself once drained
    finally:
        server.stop()
    kinds = [e["type"] for e in events]
    assert "error" not in kinds, events
    assert kinds.count("final") == 2, kinds  # the finished one and the one cut by shutdown
    assert kinds[-1] == "end"
    assert close_code == 1001
    assert code == 0


async def collect(ws: object, events: list[dict[str, Any]]) -> None:
    async for message in ws:  # type: ignore[attr-defined]
        events.append(json.loads(message))
