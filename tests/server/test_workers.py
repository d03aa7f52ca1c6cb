"""`python -m server --workers 2`: one server seen from outside, and its faults.

A real supervisor with two worker processes and one engine process on the tiny model.
Tests pin which worker a connection reaches by the `x-sensestream-worker` header of the
upgrade, reconnecting until the wanted worker answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.server.conftest import WORKER_READY, ServerProcess, followable
from tests.speech import Clip, to_s16le

SR = 16000
TIMEOUT_S = 120.0
FRAME = 3200  # 100 ms of s16le


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tiny_model_dir, "--workers", "2")
    # /readyz answers from the first worker ready; every process's series need both.
    proc.wait_for(WORKER_READY, count=2)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def speech(speech_clips: list[Clip]) -> bytes:
    """Two utterances with silence around them."""
    gap = np.zeros(SR, np.float32)
    parts = [gap[: SR // 2], speech_clips[1].audio, gap, speech_clips[6].audio, gap]
    return to_s16le(np.concatenate(parts))


def worker_of(ws: ClientConnection) -> int:
    return int(ws.response.headers["x-sensestream-worker"])


async def pinned(url: str, worker: int, **options: Any) -> ClientConnection:
    """A connection served by `worker` (the kernel picks a worker per connection; a
    worker still starting refuses with 503)."""
    for _ in range(500):
        try:
            ws = await connect(url, compression=None, **options)
        except InvalidStatus:
            continue
        if worker_of(ws) == worker:
            return ws
        await ws.close()
    raise AssertionError(f"no connection reached worker {worker}")


async def read_all(ws: ClientConnection) -> list[dict[str, Any]]:
    seen = []
    with contextlib.suppress(ConnectionClosed):
        async for message in ws:
            seen.append(json.loads(message))
    return seen


async def stream(ws: ClientConnection, audio: bytes, pace_s: float = 0.0, **start: Any) -> None:
    await ws.send(json.dumps({"type": "start", "pace": "replay"} | start))
    for i in range(0, len(audio), FRAME):
        await ws.send(audio[i : i + FRAME])
        if pace_s:
            await asyncio.sleep(pace_s)
    await ws.send(json.dumps({"type": "stop"}))


def finals(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "final"]


def stats(server: ServerProcess) -> dict[str, Any]:
    status, body = server.http("/stats")
    assert status == 200
    parsed: dict[str, Any] = json.loads(body)
    return parsed


def run(scenario: Any) -> Any:
    return asyncio.run(asyncio.wait_for(scenario, TIMEOUT_S))


def test_stats_name_every_process_and_metrics_hold_every_processes_series(
    server: ServerProcess,
) -> None:
    processes = stats(server)["processes"]
    assert processes["supervisor"] == server.proc.pid
    assert [w["worker"] for w in processes["workers"]] == [0, 1]
    assert all(isinstance(w["pid"], int) for w in (*processes["workers"], *processes["engines"]))
    assert [e["device"] for e in processes["engines"]] == ["cpu"]
    status, body = server.http("/metrics")
    assert status == 200
    for labels in ('process="worker",worker="0"', 'process="worker",worker="1"'):
        assert f"server_sessions{{{labels}}}" in body
    # The engine process's own series (its batches), scraped through its socket.
    assert any(
        line.startswith("engine_") and 'process="engine"' in line for line in body.split("\n")
    )


def test_sessions_on_both_workers_get_their_finals(server: ServerProcess, speech: bytes) -> None:
    async def scenario() -> list[list[dict[str, Any]]]:
        sockets = [await pinned(server.url, w) for w in (0, 1)]
        await asyncio.gather(*(stream(ws, speech) for ws in sockets))
        return list(await asyncio.gather(*map(read_all, sockets)))

    for events in run(scenario()):
        assert events[0]["type"] == "ready" and events[-1]["type"] == "end"
        assert len(finals(events)) == 2


def test_a_follower_on_one_worker_follows_a_stream_on_the_other(
    server: ServerProcess, speech: bytes
) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], int | None]:
        caller = await pinned(server.url, 0)
        await caller.send(json.dumps({"type": "start", "stream_id": "across", "pace": "replay"}))
        ready = json.loads(await caller.recv())
        follower = await pinned(server.url.replace("/ws", "/v1/streams/across/events"), 1)
        for i in range(0, len(speech), FRAME):
            await caller.send(speech[i : i + FRAME])
        await caller.send(json.dumps({"type": "stop"}))
        called, followed = await asyncio.gather(read_all(caller), read_all(follower))
        return [ready, *called], followed, follower.close_code

    called, followed, close_code = run(scenario())
    assert finals(called) and followed == followable(called) and close_code == 1000


def test_stream_ids_and_session_limits_hold_across_workers(
    server: ServerProcess, speech: bytes
) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        first = await pinned(server.url, 0)
        await first.send(json.dumps({"type": "start", "stream_id": "taken"}))
        assert json.loads(await first.recv())["type"] == "ready"
        listed = json.loads(await asyncio.to_thread(http_body, server, "/v1/streams"))
        assert [s["stream_id"] for s in listed["streams"]] == ["taken"]
        second = await pinned(server.url, 1)
        await second.send(json.dumps({"type": "start", "stream_id": "taken"}))
        refused = await read_all(second)
        await first.send(json.dumps({"type": "stop"}))
        return refused, await read_all(first)

    refused, kept = run(scenario())
    assert [e["code"] for e in refused if e["type"] == "error"] == ["stream_id_taken"]
    assert kept[-1]["type"] == "end"


def http_body(server: ServerProcess, path: str) -> str:
    with urllib.request.urlopen(server.url.replace("ws://", "http://").replace("/ws", path)) as r:
        body: str = r.read().decode()
    return body


async def holding(url: str, worker: int) -> ClientConnection:
    """A started session on `worker` that holds a slot.

    Connections that `pinned` opened on the other worker and closed hold a slot until
    their worker notices the close, so under a tight `--max-sessions` the first tries
    may be refused with `server_full`: try again until one is ready.
    """
    for _ in range(50):
        ws = await pinned(url, worker)
        with contextlib.suppress(ConnectionClosed):  # a refused one may have closed
            await ws.send(json.dumps({"type": "start"}))
        first = json.loads(await ws.recv())
        if first["type"] == "ready":
            return ws
        assert first["code"] == "server_full"
        await ws.close()
    raise AssertionError(f"no session started on worker {worker}")


def test_max_sessions_counts_every_workers_sessions(tiny_model_dir: Path) -> None:
    proc = ServerProcess(tiny_model_dir, "--workers", "2", "--max-sessions", "1")
    try:

        async def scenario() -> list[dict[str, Any]]:
            held = await holding(proc.url, 0)
            over = await pinned(proc.url, 1)
            events = await read_all(over)
            await held.close()
            return events

        events = run(scenario())
    finally:
        proc.stop()
    assert [e["code"] for e in events if e["type"] == "error"] == ["server_full"]


def test_a_killed_worker_loses_only_its_own_connections_and_comes_back(
    tiny_model_dir: Path, speech: bytes
) -> None:
    proc = ServerProcess(tiny_model_dir, "--workers", "2")
    # /readyz answers from the first worker ready; every process's series need both.
    proc.wait_for(WORKER_READY, count=2)
    try:
        victim = stats(proc)["processes"]["workers"][0]["pid"]

        async def scenario() -> tuple[list[dict[str, Any]], ...]:
            doomed, kept = await pinned(proc.url, 0), await pinned(proc.url, 1)
            await doomed.send(json.dumps({"type": "start", "stream_id": "doomed"}))
            await doomed.recv()  # ready: the stream is live on worker 0
            held = (await asyncio.to_thread(stats, proc))["processes"]["workers"][0]["leases"]
            assert held["session"] >= 1  # the supervisor counts it against worker 0
            follows = proc.url.replace("/ws", "/v1/streams/doomed/events")
            follower = await pinned(follows, 1)
            sending = asyncio.create_task(stream(kept, speech, pace_s=0.02))
            await asyncio.sleep(0.5)
            os.kill(victim, signal.SIGKILL)
            lost, followed = await asyncio.gather(read_all(doomed), read_all(follower))
            await sending
            return lost, followed, await read_all(kept)

        _, followed, kept = run(scenario())
        assert len(finals(kept)) == 2 and kept[-1]["type"] == "end"
        # The follower on the live worker learns that the stream's worker stopped.
        assert [e["type"] for e in followed] == ["ready", "error", "end"]
        assert followed[1]["code"] == "stream_lost"
        restarted = wait_for_worker(proc, 0, victim)

        async def after() -> list[dict[str, Any]]:
            ws = await pinned(proc.url, 0)
            await stream(ws, speech, stream_id="doomed")  # its id was released
            return await read_all(ws)

        assert len(finals(run(after()))) == 2 and restarted != victim
        # The supervisor's lease table holds nothing for the killed worker: every lease it
        # counts is one a running worker holds (both read in one go, from the table itself).
        table = stats(proc)["processes"]
        running = [worker["leases"] for worker in table["workers"]]
        assert {kind: sum(held[kind] for held in running) for kind in table["leases"]} == (
            table["leases"]
        )
    finally:
        proc.stop()


def wait_for_worker(proc: ServerProcess, worker: int, old_pid: int) -> int:
    """The pid of `worker` once the supervisor has started it again."""
    found = proc.wait_for(rf"worker {worker} started \(pid (?!{old_pid}\))(\d+)\)", 60)
    return int(found.group(1))


def test_a_killed_engine_process_is_restarted_and_every_final_arrives_once(
    tiny_model_dir: Path, speech: bytes
) -> None:
    proc = ServerProcess(tiny_model_dir, "--workers", "2")
    # /readyz answers from the first worker ready; every process's series need both.
    proc.wait_for(WORKER_READY, count=2)
    try:
        engine = stats(proc)["processes"]["engines"][0]["pid"]

        async def scenario() -> list[list[dict[str, Any]]]:
            sockets = [await pinned(proc.url, w) for w in (0, 1)]
            sending = [asyncio.create_task(stream(ws, speech, pace_s=0.05)) for ws in sockets]
            await asyncio.sleep(1.2)  # inside each stream's first utterance
            os.kill(engine, signal.SIGKILL)
            await asyncio.gather(*sending)
            return list(await asyncio.gather(*map(read_all, sockets)))

        for events in run(scenario()):
            got = finals(events)
            assert [f["utt_id"] for f in got] == sorted({f["utt_id"] for f in got})
            assert len(got) == 2 and events[-1]["type"] == "end"
        assert stats(proc)["processes"]["engines"][0]["pid"] != engine
    finally:
        proc.stop()


def test_sigterm_drains_both_workers_then_exits_zero(tiny_model_dir: Path, speech: bytes) -> None:
    proc = ServerProcess(tiny_model_dir, "--workers", "2")
    # /readyz answers from the first worker ready; every process's series need both.
    proc.wait_for(WORKER_READY, count=2)

    async def scenario() -> list[tuple[list[dict[str, Any]], int | None]]:
        sockets = [await pinned(proc.url, w) for w in (0, 1)]
        half = len(speech) // 2 // FRAME * FRAME
        for ws in sockets:
            await ws.send(json.dumps({"type": "start", "pace": "replay"}))
            await ws.send(speech[:half])
        await asyncio.sleep(0.5)
        proc.terminate()
        return [(await read_all(ws), ws.close_code) for ws in sockets]

    try:
        outcomes = run(scenario())
    finally:
        code = proc.stop()
    for events, close_code in outcomes:
        assert finals(events) and events[-1]["type"] == "end" and close_code == 1001
    assert code == 0


def exited(pid: int, timeout_s: float) -> bool:
    """Whether process `pid` ends within `timeout_s` (waiting on its pidfd, not polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout_s)
        return bool(readable)
    finally:
        os.close(fd)


def test_a_killed_supervisor_leaves_no_worker_or_engine_behind(tiny_model_dir: Path) -> None:
    proc = ServerProcess(tiny_model_dir, "--workers", "2")
    # /readyz answers from the first worker ready; every process's series need both.
    proc.wait_for(WORKER_READY, count=2)
    processes = stats(proc)["processes"]
    children = [p["pid"] for p in (*processes["workers"], *processes["engines"])]
    try:
        os.kill(proc.proc.pid, signal.SIGKILL)
        # Workers see their channel close; the engine, its stdin pipe reach its end.
        left = [pid for pid in children if not exited(pid, 30.0)]
        assert not left, [Path(f"/proc/{pid}/cmdline").read_bytes()[:200] for pid in left]
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.stop()


def test_ctrl_c_reaches_the_supervisor_alone_which_drains_then_exits_zero(
    tiny_model_dir: Path, speech: bytes
) -> None:
    proc = ServerProcess(tiny_model_dir, "--workers", "2")
    # /readyz answers from the first worker ready; every process's series need both.
    proc.wait_for(WORKER_READY, count=2)
    processes = stats(proc)["processes"]
    children = [p["pid"] for p in (*processes["workers"], *processes["engines"])]

    async def scenario() -> tuple[list[dict[str, Any]], int | None]:
        ws = await pinned(proc.url, 1)
        half = len(speech) // 2 // FRAME * FRAME
        await ws.send(json.dumps({"type": "start", "pace": "replay"}))
        await ws.send(speech[:half])
        await asyncio.sleep(0.5)
        # A terminal's Ctrl-C signals its foreground process group: the supervisor's.
        proc.proc.send_signal(signal.SIGINT)
        return await read_all(ws), ws.close_code

    try:
        # The children are in groups of their own, so that signal is the supervisor's alone
        # (the engine must outlive the workers' drain).
        group = os.getpgid(proc.proc.pid)
        assert all(os.getpgid(pid) != group for pid in children)
        events, close_code = run(scenario())
    finally:
        code = proc.stop()
    assert finals(events) and events[-1]["type"] == "end" and close_code == 1001
    assert code == 0
