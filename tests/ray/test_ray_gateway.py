"""One gateway in front of two Ray Serve engine replicas: the same finals as in-process,
and every owed final exactly once when a replica dies mid-utterance.

The gateway is a real server in this process (`--engine ray://auto` reuses this
process's Ray connection); the replicas are Serve actors of a loopback-only local cluster.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray

from engine.remote.gateway import RemoteEngine
from engine.remote.messages import Tick
from engine.remote.ray_serve import RayTransport
from sensestream.client import Outcome, run_session
from tests.ray.conftest import ENGINE_OPTIONS, REPLICAS
from tests.server.inprocess import serving
from tests.speech import Clip, to_s16le

SR = 16000
SESSIONS = 4


def session_audio(clips: list[Clip], i: int) -> bytes:
    """Two utterances with pauses around them, different for each session."""
    gap = np.zeros(SR, np.float32)
    first, second = clips[i % len(clips)], clips[(i + 3) % len(clips)]
    return to_s16le(np.concatenate([gap, first.audio[: 4 * SR], gap, second.audio[: 4 * SR], gap]))


def finals(outcome: Outcome) -> list[tuple[int, str]]:
    return [(e["utt_id"], e["text"]) for e in outcome.of("final")]


async def stream_all(url: str, clips: list[Clip]) -> list[Outcome]:
    return list(
        await asyncio.gather(
            *(
                run_session(url, session_audio(clips, i), speed=4.0, linger=90)
                for i in range(SESSIONS)
            )
        )
    )


@pytest.fixture(scope="module")
def in_process_finals(tiny_model_dir: Path, speech_clips: list[Clip]) -> list[list[Any]]:
    async def run() -> list[Outcome]:
        async with serving(tiny_model_dir, **ENGINE_OPTIONS) as (_, url):
            return await stream_all(url, speech_clips)

    return [finals(o) for o in asyncio.run(run())]


def test_the_gateway_gets_the_in_process_finals_from_two_replicas(
    ray_cluster: str, tiny_model_dir: Path, speech_clips: list[Clip], in_process_finals: list
) -> None:
    async def run() -> tuple[list[Outcome], dict[str, Any], str]:
        async with serving(tiny_model_dir, engine_url=f"ray://auto?app={ray_cluster}") as (
            app,
            url,
        ):
            outcomes = await stream_all(url, speech_clips)
            return outcomes, await app.stats(), app._readyz().body.decode()

    outcomes, stats, ready = asyncio.run(run())
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}  # loopback only
    assert [finals(o) for o in outcomes] == in_process_finals
    assert all(len(f) == 2 for f in in_process_finals)
    assert len(stats["replicas"]) == REPLICAS and f"{REPLICAS} engine replica(s)" in ready
    # Both replicas decoded: the sessions were spread over them.
    assert {d["replica"] for d in stats["devices"]} == set(stats["replicas"])
    assert stats["batches"]["count"] > 0


def kill_replica(replica: str) -> None:
    for actor in ray.util.list_named_actors(all_namespaces=True):
        if actor["name"].endswith(f"#{replica}"):
            ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True)
            return
    raise AssertionError(f"no actor for replica {replica}")


def test_a_replica_killed_mid_utterance_loses_no_final_and_repeats_none(
    ray_cluster: str,
    tiny_model_dir: Path,
    speech_clips: list[Clip],
    in_process_finals: list,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    killed: list[str] = []
    send = RayTransport.tick

    async def tick_then_kill(self: RayTransport, replica: str, tick: Tick) -> None:
        await send(self, replica, tick)
        # The replica has taken a final (or the early decode that becomes one) and is
        # decoding it: now it dies.
        if not killed and any(r.kind.urgent for r in tick.requests):
            killed.append(replica)
            kill_replica(replica)

    monkeypatch.setattr(RayTransport, "tick", tick_then_kill)

    async def run() -> tuple[list[Outcome], RemoteEngine]:
        async with serving(tiny_model_dir, engine_url=f"ray://auto?app={ray_cluster}") as (
            app,
            url,
        ):
            assert isinstance(app.engine, RemoteEngine)
            return await stream_all(url, speech_clips), app.engine

    outcomes, engine = asyncio.run(run())
    assert killed
    for outcome, expected in zip(outcomes, in_process_finals, strict=True):
        assert finals(outcome) == expected  # each final once, in order, none lost
        assert outcome.ended and not outcome.of("error")
    assert engine.metrics.lost._value.get() == 1
    assert engine.metrics.resent._value.get() >= 1
