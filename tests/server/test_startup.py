"""Start-up as a person sees it: port first, a clean log, long-polled readiness, live drain."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.server.conftest import REPO, ServerProcess, unready_server
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


def test_readyz_long_poll_answers_when_the_model_is_ready(tiny_model_dir: Path) -> None:
    server = unready_server(
        sys.executable, "--model", str(tiny_model_dir), "--no-reuse-tuning", cwd=REPO
    )
    try:
        # Asked right after binding, while the model loads: the answer waits for readiness
        # (or, on a very slow host, for the whole 8 s) instead of a 503 at once.
        started = time.monotonic()
        status, _ = server.get("/readyz?wait=8", timeout_s=20)
        waited = time.monotonic() - started
        assert status == 200 or (status == 503 and waited >= 7.5), (status, waited)
        server.wait_ready()
        assert json.loads(server.get("/stats")[1])["state"] == "ready"
    finally:
        assert server.stop() == 0


def test_sigterm_while_a_client_keeps_sending_gives_owed_finals_end_and_1001(
    tiny_model_dir: Path, speech_clips: list[Clip]
) -> None:
    server = ServerProcess(tiny_model_dir)
    speech = np.concatenate([np.zeros(SR // 2, np.float32), speech_clips[1].audio])
    audio = to_s16le(np.concatenate([speech, np.zeros(SR, np.float32), speech] * 3))
    events: list[dict] = []

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


async def collect(ws: object, events: list[dict]) -> None:
    async for message in ws:  # type: ignore[attr-defined]
        events.append(json.loads(message))
