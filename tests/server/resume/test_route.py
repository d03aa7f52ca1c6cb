"""Resuming v1 streams end to end: a client whose connection is cut, again and again,
through a loopback proxy, gets exactly the finals of an uncut run, each once; bad resumes
get a typed error and leave the stream unharmed."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from sensestream.client import multichannel_start, run_session
from sensestream.resuming import resumable_session
from tests.callcentre.call import LABELS, RATE, make_call
from tests.server.served import served
from tools.cutting_proxy import CuttingProxy

SR = 16000
START = {"type": "start", "pace": "replay", "language": "en"}


def finals(events: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(e["utt_id"], e["text"]) for e in events if e["type"] == "final"]


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", maxsplit=1)[0])


async def cut_now_and_then(proxy: CuttingProxy, times: int, within_s: float, seed: int) -> None:
    rng = random.Random(seed)
    moments = sorted(rng.uniform(0.2, within_s) for _ in range(times))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    for moment in moments:
        await asyncio.sleep(max(0.0, t0 + moment - loop.time()))
        proxy.cut()


def test_a_stream_cut_five_times_gets_the_finals_of_an_uncut_run_each_once(
    tiny_model_dir: Path, speech: bytes
) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], Any, int]:
        async with served(tiny_model_dir, "1", resume_grace_s=30) as url:
            uncut = await run_session(url, speech, start=START, speed=10.0, pace=None)
            async with CuttingProxy(port_of(url)).running() as proxy:
                via = url.replace(f":{port_of(url)}/", f":{proxy.port}/")
                cutter = asyncio.create_task(cut_now_and_then(proxy, 5, 5.0, seed=7))
                cut = await resumable_session(via, speech, start=START, speed=10.0)
                await cutter
                return uncut.events, cut, proxy.cuts

    uncut, cut, cuts = asyncio.run(scenario())
    assert cuts == 5 and len(cut.gaps) >= 3  # cuts between connections find nothing open
    expected = finals(uncut)
    assert len(expected) >= 5
    assert finals(cut.events) == expected  # none missing, none twice, in order
    assert cut.ended and len(cut.of("resumed")) == len(cut.gaps)
    assert cut.of("ack") and all(e["samples"] > 0 for e in cut.of("ack"))


def test_bad_resumes_are_refused_and_the_stream_they_name_goes_on(
    tiny_model_dir: Path, speech: bytes
) -> None:
    async def first_connection(url: str) -> dict[str, Any]:
        """A stream whose client reads its token and acks, then vanishes mid-stream."""
        ws = await connect(url)
        await ws.send(json.dumps(START))
        ready = json.loads(await ws.recv())
        for offset in range(0, 5 * 2 * SR, 3200):
            await ws.send(speech[offset : offset + 3200])
        acked = 0
        while acked == 0:
            event = json.loads(await ws.recv())
            acked = event["samples"] if event["type"] == "ack" else 0
        ws.transport.abort()
        return {"token": ready["resume_token"], "acked": acked}

    async def attempt(url: str, resume: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
        async with connect(url) as ws:
            await ws.send(json.dumps({"type": "start", "resume": resume}))
            event = json.loads(await ws.recv())
            await asyncio.sleep(0.1)
            with_code = ws.close_code
            return event, with_code

    async def scenario() -> dict[str, Any]:
        async with served(tiny_model_dir, "1", resume_grace_s=30) as url:
            got = await first_connection(url)
            token, acked = got["token"], got["acked"]
            forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
            out = {
                "forged": await attempt(url, {"token": forged, "samples": acked}),
                "ahead": await attempt(url, {"token": token, "samples": 10**9}),
            }
            # The stream is unharmed: the right resume takes it up and it ends as usual.
            async with connect(url) as ws:
                resume = {"token": token, "samples": acked, "last_utt_id": None}
                await ws.send(json.dumps({"type": "start", "resume": resume}))
                resumed = json.loads(await ws.recv())
                await ws.send(speech[acked * 2 : 8 * 2 * SR])
                await ws.send(json.dumps({"type": "stop"}))
                rest = [json.loads(m) async for m in ws]
            out["resumed"], out["rest"] = resumed, rest
            return out

    out = asyncio.run(scenario())
    for name in ("forged", "ahead"):
        event, code = out[name]
        assert event["type"] == "error" and event["code"] == "resume_refused", name
        assert code == 1008, name
    assert "not one this server signed" in out["forged"][0]["message"]
    assert "resend from at most" in out["ahead"][0]["message"]
    resumed = out["resumed"]
    assert resumed["type"] == "resumed" and resumed["samples"] >= 0 and resumed["resume_token"]
    assert out["rest"][-1]["type"] == "end"


def test_without_a_grace_a_resume_is_refused_and_ready_gives_no_token(tiny_model_dir: Path) -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with served(tiny_model_dir, "1", resume_grace_s=0) as url:
            async with connect(url) as ws:
                await ws.send(json.dumps(START))
                ready = json.loads(await ws.recv())
            async with connect(url) as ws:
                resume = {"token": "rs_x.y", "samples": 0}
                await ws.send(json.dumps({"type": "start", "resume": resume}))
                refused = json.loads(await ws.recv())
            return ready, refused

    ready, refused = asyncio.run(scenario())
    assert ready["type"] == "ready" and "resume_token" not in ready
    assert refused["code"] == "resume_refused" and "does not resume" in refused["message"]


def test_a_resume_takes_the_stream_from_a_socket_that_has_not_noticed_its_drop(
    tiny_model_dir: Path, speech: bytes
) -> None:
    # A network that drops silently leaves the server's socket open for a while: the
    # client's resume must not wait for it to time out.
    async def scenario() -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
        async with served(tiny_model_dir, "1", resume_grace_s=30) as url:
            old = await connect(url)
            await old.send(json.dumps(START))
            token = json.loads(await old.recv())["resume_token"]
            await old.send(speech[: 3 * 2 * SR])
            async with connect(url) as ws:  # the old socket still open, unread
                resume = {"token": token, "samples": 0, "last_utt_id": None}
                await ws.send(json.dumps({"type": "start", "resume": resume}))
                resumed = json.loads(await ws.recv())
                await ws.send(speech[: 4 * 2 * SR])
                await ws.send(json.dumps({"type": "stop"}))
                rest = [json.loads(m) async for m in ws]
            await asyncio.wait_for(old.wait_closed(), 10)
            return resumed, rest, old.close_code is not None or old.state.name == "CLOSED"

    resumed, rest, old_closed = asyncio.run(scenario())
    assert resumed["type"] == "resumed" and resumed["samples"] > 0
    assert rest[-1]["type"] == "end" and old_closed


def test_a_two_party_call_cut_three_times_gets_each_channels_finals_once(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    call = make_call(tmp_path_factory.mktemp("call"))
    audio = call.stereo()  # μ-law at 8 kHz: a byte a sample, two channels
    start = multichannel_start("resumed-call", LABELS, RATE) | {"pace": "replay"}
    per_second = 2 * RATE

    async def scenario() -> tuple[list[dict[str, Any]], Any]:
        async with served(tiny_model_dir, "1", resume_grace_s=30) as url:
            uncut = await run_session(url, audio, start=start, chunk=1600, speed=8.0, pace=None)
            async with CuttingProxy(port_of(url)).running() as proxy:
                via = url.replace(f":{port_of(url)}/", f":{proxy.port}/")
                span = len(audio) / per_second / 8.0
                cutter = asyncio.create_task(cut_now_and_then(proxy, 3, span, seed=11))
                cut = await resumable_session(
                    via,
                    audio,
                    start={**start, "stream_id": "resumed-call-2"},
                    chunk=1600,
                    speed=8.0,
                    bytes_per_frame=2,
                    bytes_per_second=per_second,
                )
                await cutter
                return uncut.events, cut

    uncut, cut = asyncio.run(scenario())

    def by_channel(events: list[dict[str, Any]]) -> list[tuple[int, int, str]]:
        return sorted(
            (e["channel"], e["utt_id"], e["text"]) for e in events if e["type"] == "final"
        )

    assert cut.ended and cut.gaps and cut.channels == 2
    assert by_channel(cut.events) == by_channel(uncut) and by_channel(uncut)


def test_a_new_stream_whose_first_message_comes_late_loses_nothing(
    tiny_model_dir: Path, speech: bytes
) -> None:
    # The server looks at a new connection's first message for a resume, 2 s at most:
    # a client that waits longer (a page waiting for its microphone) is a new stream.
    async def scenario() -> list[str]:
        async with served(tiny_model_dir, "1", resume_grace_s=30) as url, connect(url) as ws:
            await asyncio.sleep(2.5)
            await ws.send(json.dumps(START))
            await ws.send(speech[: 2 * 2 * SR])
            await ws.send(json.dumps({"type": "stop"}))
            return [json.loads(m)["type"] async for m in ws]

    kinds = asyncio.run(scenario())
    assert kinds[0] == "ready" and kinds[-1] == "end"
