"""A live session's final latency beside a continuous fast replay, against the same session
alone, side by side in one run (issue 32: fast senders must not starve live ones).

One server; rounds alternate between the live session alone and the live session while
a replay client sends the same speech again and again as fast as the server reads it
(`pace: replay`, frames at the frame cap). The live session sends 100 ms frames at real
time; each final's latency is from the frame that completed the audio up to the server's
VAD decision (`decided_ms`) to the final's arrival, so the end-silence is not counted; and
from the frame that completed the utterance's speech (`end_ms`), which counts it. The
first is small (an early decode often answers before the VAD decides), so the second's
ratio is the one to read.

The command line is scripts/bench_fairness.py.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.types import SAMPLE_RATE
from sensestream.client import Outcome, pcm16, run_session
from tools.bench.common.cli import add_json, add_rounds, add_server_args, parser_for
from tools.bench.common.finals import FRAME_MS, latencies_ms
from tools.bench.common.output import machine, write_json
from tools.bench.common.stats import spread
from tools.demo_model.texts import held_out
from tools.spawn import ServerSpec, spawn
from tools.speech import speak

FLOOD_FRAME = 256 * 1024  # the default frame cap


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = parser_for(__doc__)
    parser.add_argument("--model", default="models/demo", help="model folder (default: demo)")
    add_server_args(parser)
    add_rounds(parser, 3, "rounds of each condition")
    parser.add_argument("--sentences", type=int, default=6, help="sentences the live one says")
    add_json(parser)
    return parser.parse_args(argv)


def speech(sentences: int) -> np.ndarray:
    """Demo-vocabulary sentences, 1.2 s apart, with a lead and a tail the VAD can close on."""
    gap = np.zeros(int(1.2 * SAMPLE_RATE), np.float32)
    parts = [gap]
    for sentence in held_out(7, sentences):
        parts += [speak(sentence.spoken), gap]
    return np.concatenate(parts)


async def live(url: str, audio: bytes) -> Outcome:
    chunk = SAMPLE_RATE * 2 * FRAME_MS // 1000
    return await run_session(url, audio, chunk=chunk, speed=1.0, pace=None)


async def flood_until(url: str, audio: bytes, done: asyncio.Event) -> dict[str, float]:
    """Replay `audio` again and again, as fast as the server reads it, until `done`."""
    start = {"type": "start", "pace": "replay"}
    sent_s, errors, began = 0.0, 0, time.monotonic()
    while not done.is_set():
        outcome = await run_session(url, audio, start=start, chunk=FLOOD_FRAME, speed=0.0)
        errors += len(outcome.of("error"))
        sent_s += len(audio) / (2 * SAMPLE_RATE)
    return {
        "replayed_audio_s": sent_s,
        "replay_x_real_time": sent_s / (time.monotonic() - began),
        "replay_errors": errors,
    }


async def beside_flood(url: str, audio: bytes) -> tuple[Outcome, dict[str, float]]:
    done = asyncio.Event()
    flood = asyncio.create_task(flood_until(url, audio, done))
    try:
        outcome = await live(url, audio)
    finally:
        done.set()
    return outcome, await flood


def summary(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"count": 0}
    ms = spread(samples)
    return {"count": ms.count, "p50_ms": ms.p50, "p95_ms": ms.p95, "mean_ms": ms.mean}


def run_rounds(url: str, audio: bytes, rounds: int) -> dict[str, Any]:
    measures = {"after_speech_end": "end_ms", "after_vad_decision": "decided_ms"}
    alone: dict[str, list[float]] = {name: [] for name in measures}
    beside: dict[str, list[float]] = {name: [] for name in measures}
    floods: list[dict[str, float]] = []
    live_errors = 0
    for _ in range(rounds):  # alternating, so drift in the machine's speed hits both
        solo = asyncio.run(live(url, audio))
        shared, flood = asyncio.run(beside_flood(url, audio))
        for name, field in measures.items():
            alone[name] += latencies_ms(solo, field)
            beside[name] += latencies_ms(shared, field)
        floods.append(flood)
        live_errors += len(solo.of("error")) + len(shared.of("error"))
    result: dict[str, Any] = {"replays": floods, "live_errors": live_errors}
    for name in measures:
        alone_s, beside_s = summary(alone[name]), summary(beside[name])
        entry: dict[str, Any] = {"alone": alone_s, "beside_replay": beside_s}
        if alone_s["count"] and beside_s["count"]:
            entry["ratio_p50"] = beside_s["p50_ms"] / alone_s["p50_ms"]
            entry["ratio_p95"] = beside_s["p95_ms"] / alone_s["p95_ms"]
        result[f"final_{name}"] = entry
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    audio = pcm16(speech(args.sentences))
    server_args = ("--model", args.model, *shlex.split(args.server_args))
    with spawn(ServerSpec(server_args)) as server:
        result = run_rounds(server.url, audio, args.rounds)
    report = {
        "benchmark": "a live session's final latency, alone and beside a continuous fast replay",
        "server_args": list(server_args),
        "rounds": args.rounds,
        "live_audio_s": len(audio) / (2 * SAMPLE_RATE),
        **machine("cpus", "cpu"),
        **result,
    }
    print(write_json(args.json, report, indent=2))
    return 0
