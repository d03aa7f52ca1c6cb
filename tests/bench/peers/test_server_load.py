"""The whole-utterance load: both wire protocols against small real servers on 127.0.0.1:0."""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Awaitable, Callable

import numpy as np
import pytest
import websockets

from tools.bench.common.rounds import alternate
from tools.bench.peers.server_cli import medians
from tools.bench.peers.server_clients import FunasrOfflineClient, SherpaClient
from tools.bench.peers.server_load import assignment, closed_loop

Handler = Callable[[websockets.ServerConnection], Awaitable[None]]


async def sherpa_like(ws: websockets.ServerConnection) -> None:
    """sherpa-onnx's framing: header, float32 bytes until the count, a text reply; Done."""
    while (header := await ws.recv()) != "Done":
        assert isinstance(header, bytes)
        rate, size = struct.unpack("<ii", header[:8])
        data = header[8:]
        while len(data) < size:
            data += await ws.recv()
        samples = np.frombuffer(data, "<f4")
        await ws.send(f"{rate} {len(samples)} {samples[0]:.2f}" if len(samples) else "<EMPTY>")


async def funasr_like(ws: websockets.ServerConnection) -> None:
    """FunASR offline: config, PCM, end; one result per half second of audio, then is_final."""
    start = json.loads(await ws.recv())
    pcm = b""
    while isinstance(message := await ws.recv(), bytes):
        pcm += message
    assert json.loads(message) == {"is_speaking": False} and start["mode"] == "offline"
    samples = np.frombuffer(pcm, "<i2")
    for i in range(0, len(samples), 8000):
        await ws.send(json.dumps({"mode": "2pass-offline", "text": f"part{i // 8000}"}))
    await ws.send(json.dumps({"mode": "2pass-offline", "text": "", "is_final": True}))


def serve_and_run(handler: Handler, run: Callable[[str], Awaitable[object]]) -> object:
    async def main() -> object:
        async with websockets.serve(handler, "127.0.0.1", 0, max_size=None) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            return await run(f"ws://127.0.0.1:{port}")

    return asyncio.run(main())


def test_each_connection_takes_its_own_run_of_clips_wrapping_around() -> None:
    assert assignment(5, 3, 2) == [[0, 1], [2, 3], [4, 0]]


def test_sherpa_framing_carries_every_sample_and_keeps_the_connection() -> None:
    clips = [np.full(16000 * (i + 1), 0.1 * (i + 1), np.float32) for i in range(3)]
    result = serve_and_run(
        sherpa_like, lambda url: closed_loop(lambda: SherpaClient(url), clips, 2, 3)
    )
    assert sorted(result.texts) == sorted(  # type: ignore[attr-defined]
        f"16000 {len(clips[i])} {0.1 * (i + 1):.2f}" for i in [0, 1, 2, 0, 1, 2]
    )
    assert result.audio_s == pytest.approx(2 * (1 + 2 + 3))  # type: ignore[attr-defined]
    assert len(result.latencies_s) == 6  # type: ignore[attr-defined]


def test_funasr_client_joins_every_result_up_to_is_final() -> None:
    clip = np.zeros(16000 * 2, np.float32)  # 2 s: four half-second results
    text = serve_and_run(funasr_like, lambda url: FunasrOfflineClient(url).decode(clip))
    assert text == "part0 part1 part2 part3"


def test_funasr_client_raises_on_a_server_error() -> None:
    async def refuse(ws: websockets.ServerConnection) -> None:
        await ws.recv()  # the config
        while isinstance(await ws.recv(), bytes):
            pass
        await ws.send(json.dumps({"mode": "2pass-offline", "text": "", "error": {"code": "x"}}))

    with pytest.raises(RuntimeError, match="server error"):
        serve_and_run(refuse, lambda url: FunasrOfflineClient(url).decode(np.zeros(160)))


def test_servers_alternate_and_medians_are_per_system() -> None:
    order = list(alternate(["a", "b"], 3))
    assert order == [(0, "a"), (0, "b"), (1, "b"), (1, "a"), (2, "a"), (2, "b")]
    rows = [
        {"system": "a", "audio_s_per_s": v, "latency_p50_s": 1, "latency_p95_s": 2, "cores_used": 1}
        for v in (10, 30, 20)
    ]
    assert medians(rows)["a"]["audio_s_per_s"] == 20
