"""Resuming with `--workers 2`: a resume that lands on the worker that does not hold the
stream is piped through the supervisor to the one that does, and the stream goes on with
every final once."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from sensestream.client import run_session
from sensestream.resuming import resumable_session
from tests.server.conftest import WORKER_READY, ServerProcess
from tests.server.resume.test_route import START, cut_now_and_then, finals, port_of
from tests.server.test_workers import pinned, worker_of
from tools.cutting_proxy import CuttingProxy

SR = 16000
FRAME = 3200


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tiny_model_dir, "--workers", "2", "--resume-grace-s", "30")
    proc.wait_for(WORKER_READY, count=2)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def uncut(server: ServerProcess, speech: bytes) -> list[tuple[int, str]]:
    async def run() -> list[tuple[int, str]]:
        result = await run_session(server.url, speech, start=START, speed=10.0, pace=None)
        return finals(result.events)

    expected = asyncio.run(run())
    assert len(expected) >= 5
    return expected


async def read_until_acked(ws: ClientConnection, events: list[dict[str, Any]]) -> int:
    """Read until an ack comes after at least one final; the acked sample count."""
    while True:
        event = json.loads(await ws.recv())
        events.append(event)
        if event["type"] == "ack" and finals(events):
            return int(event["samples"])


def test_a_resume_landing_on_the_other_worker_takes_the_stream_up_there(
    server: ServerProcess, speech: bytes, uncut: list[tuple[int, str]]
) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
        before: list[dict[str, Any]] = []
        ws = await pinned(server.url, 0)
        await ws.send(json.dumps(START))
        ready = json.loads(await ws.recv())
        sender = asyncio.create_task(send_paced(ws, speech[: 30 * 2 * SR]))
        acked = await read_until_acked(ws, before)
        sender.cancel()
        ws.transport.abort()  # the drop: worker 0 parks the stream
        with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
            await sender
        got = [e["utt_id"] for e in before if e["type"] == "final"]
        resume = {"token": ready["resume_token"], "samples": acked, "last_utt_id": got[-1]}
        again = await pinned(server.url, 1)
        await again.send(json.dumps({"type": "start", "resume": resume}))
        resumed = json.loads(await again.recv())
        await send_paced(again, speech[acked * 2 :])  # from S: the server drops T - S
        await again.send(json.dumps({"type": "stop"}))
        after = [json.loads(m) async for m in again]
        return before, [resumed, *after], worker_of(again)

    before, after, landed = asyncio.run(scenario())
    assert landed == 1
    assert after[0]["type"] == "resumed", after[0]
    assert after[-1]["type"] == "end"
    assert finals(before) + finals(after) == uncut  # none missing, none twice


async def send_paced(ws: ClientConnection, audio: bytes) -> None:
    """Ten times real time, so that finals and acks come while audio still goes."""
    for offset in range(0, len(audio), FRAME):
        await ws.send(audio[offset : offset + FRAME])
        await asyncio.sleep(FRAME / 2 / SR / 10)


def test_a_stream_cut_five_times_on_two_workers_gets_the_finals_of_an_uncut_run(
    server: ServerProcess, speech: bytes, uncut: list[tuple[int, str]]
) -> None:
    async def scenario() -> tuple[Any, int]:
        async with CuttingProxy(server.port).running() as proxy:
            via = server.url.replace(f":{port_of(server.url)}/", f":{proxy.port}/")
            cutter = asyncio.create_task(cut_now_and_then(proxy, 5, 5.0, seed=11))
            cut = await resumable_session(via, speech, start=START, speed=10.0)
            await cutter
            return cut, proxy.cuts

    cut, cuts = asyncio.run(scenario())
    assert cuts == 5 and cut.gaps
    assert finals(cut.events) == uncut
    assert cut.ended and len(cut.of("resumed")) == len(cut.gaps)
