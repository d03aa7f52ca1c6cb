"""Resuming a stream after its connection drops: how soon the client is back, and how soon
after its audio is resent the next final comes; and that the finals equal an uncut run's.

A demo-model server (`--resume-grace-s 30`, one worker) hears about a minute of espeak
sentences (a second of quiet after each), sent as a replay at `--speed` x real time, once
straight and `--runs` times through a loopback proxy that cuts the connection at
`--cuts` random moments (sensestream.resuming reconnects after 0.1 s, then resumes).
Per resume: from the drop to `resumed`; from the moment the resent audio reached where
the dropped connection had got, to the next final that arrives after it.

`--workers 2` runs a supervisor with two workers: a resume then lands on either, and one
that lands on the other worker is piped to the stream's. `--reload` (two workers) cuts
nothing: each run sends the supervisor SIGHUP once, at a random moment in its first
third, and every stream is handed over as its worker is replaced (closed with 1012 at a
pause, resumed on the worker that goes on with it).

The command line is scripts/bench_resume.py.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shlex
import signal
import statistics
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sensestream.client import pcm16, run_session
from sensestream.resuming import Resumable, resumable_session
from tools.bench.common.cli import add_json, add_server_args, parser_for
from tools.bench.common.output import machine, write_json
from tools.cutting_proxy import CuttingProxy
from tools.demo_model.texts import held_out
from tools.spawn import ServerSpec, spawn
from tools.speech import load, synthesize

SR = 16000


def speech(seconds: float, seed: int, folder: Path) -> bytes:
    """Held-out demo sentences in one espeak voice, each followed by a second of quiet."""
    parts: list[np.ndarray] = []
    for sentence in held_out(seed, 200):
        parts += [load(synthesize(sentence.spoken, "en-us", folder)), np.zeros(SR, np.float32)]
        if sum(len(p) for p in parts) >= seconds * SR:
            break
    return pcm16(np.concatenate(parts))


def finals(events: Sequence[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(e["utt_id"], e["text"]) for e in events if e["type"] == "final"]


def _next_finals(seen: Resumable) -> list[tuple[float, float, dict[str, Any]]]:
    """For each resume that caught up: when, where (stream ms), and the next final after
    it with the time it came. A resume whose next final comes only after the next drop
    is left out: that drop's resume is timed instead."""
    finals_at = [
        (e, t) for e, t in zip(seen.events, seen.times, strict=True) if e["type"] == "final"
    ]
    drops = [a for a, _ in seen.gaps]
    out = []
    for caught, caught_ms in zip(seen.caught_up, seen.caught_up_ms, strict=True):
        later = [(e, t) for e, t in finals_at if t >= caught]
        if later and not any(caught < a < later[0][1] for a in drops):
            out.append((caught, caught_ms, {**later[0][0], "at": later[0][1]}))
    return out


def after_catch_up(seen: Resumable) -> list[float]:
    """For each resume: from its resent audio's catch-up to the next final after it."""
    return [event["at"] - caught for caught, _, event in _next_finals(seen)]


def beyond_audio(seen: Resumable, speed: float) -> list[float]:
    """For each resume, `after_catch_up` less the time the audio itself still needed at
    catch-up to reach that final's end (the rest of its utterance, sent at `speed`): the
    delay the resume added, which the bar is on."""
    out = []
    for caught, caught_ms, event in _next_finals(seen):
        to_come = max(0.0, event["end_ms"] - caught_ms) / 1000 / speed
        out.append(max(0.0, event["at"] - caught - to_come))
    return out


async def cut_run(url: str, audio: bytes, start: dict[str, Any], args: Any, seed: int) -> Resumable:
    port = int(url.rsplit(":", 1)[1].split("/", maxsplit=1)[0])
    async with CuttingProxy(port).running() as proxy:
        via = url.replace(f":{port}/", f":{proxy.port}/")
        rng = random.Random(seed)
        span = len(audio) / 2 / SR / args.speed
        moments = sorted(rng.uniform(0.5, span) for _ in range(args.cuts))

        async def cutter() -> None:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            for moment in moments:
                await asyncio.sleep(max(0.0, t0 + moment - loop.time()))
                proxy.cut()

        task = asyncio.create_task(cutter())
        seen = await resumable_session(via, audio, start=start, speed=args.speed)
        task.cancel()
        return seen


async def reload_run(
    url: str,
    audio: bytes,
    start: dict[str, Any],
    args: Any,
    *,
    seed: int,
    proc: subprocess.Popen[str],
) -> Resumable:
    """One stream through a reload (SIGHUP to the supervisor) at a random moment."""
    span = len(audio) / 2 / SR / args.speed
    moment = random.Random(seed).uniform(0.5, span / 3)

    async def reloader() -> None:
        await asyncio.sleep(moment)
        proc.send_signal(signal.SIGHUP)

    task = asyncio.create_task(reloader())
    seen = await resumable_session(url, audio, start=start, speed=args.speed)
    task.cancel()
    return seen


async def measure(url: str, audio: bytes, args: Any, proc: subprocess.Popen[str]) -> dict[str, Any]:
    start = {"type": "start", "pace": "replay", "language": "en"}
    uncut = await run_session(url, audio, start=start, speed=args.speed, pace=None)
    expected = finals(uncut.events)
    runs = []
    for k in range(args.runs):
        if args.reload:
            seen = await reload_run(url, audio, start, args, seed=args.seed + k, proc=proc)
        else:
            seen = await cut_run(url, audio, start, args, args.seed + k)
        runs.append(
            {
                "resumes": len(seen.gaps),
                "finals_equal_uncut": finals(seen.events) == expected,
                "drop_to_resumed_s": [round(b - a, 3) for a, b in seen.gaps],
                "catch_up_to_next_final_s": [round(v, 3) for v in after_catch_up(seen)],
                "beyond_audio_s": [round(v, 3) for v in beyond_audio(seen, args.speed)],
            }
        )
        print(runs[-1], flush=True)
    return {"finals_uncut": len(expected), "runs": runs}


def summary(measured: dict[str, Any]) -> dict[str, Any]:
    runs = measured["runs"]
    back = [v for r in runs for v in r["drop_to_resumed_s"]]
    nxt = [v for r in runs for v in r["catch_up_to_next_final_s"]]
    beyond = [v for r in runs for v in r.get("beyond_audio_s", [])]

    def p(values: list[float], q: float) -> float | None:
        return round(float(np.percentile(values, q)), 3) if values else None

    return {
        "resumes": len(back),
        "runs_with_finals_equal_uncut": sum(r["finals_equal_uncut"] for r in runs),
        "drop_to_resumed_s": {"p50": p(back, 50), "p95": p(back, 95), "max": p(back, 100)},
        "catch_up_to_next_final_s": {
            "p50": p(nxt, 50),
            "p95": p(nxt, 95),
            "max": p(nxt, 100),
            "mean": round(statistics.fmean(nxt), 3) if nxt else None,
        },
        "beyond_audio_s": {"p50": p(beyond, 50), "p95": p(beyond, 95), "max": p(beyond, 100)},
        "bar_s": 1.0,
    }


def parser() -> argparse.ArgumentParser:
    p = parser_for(__doc__)
    p.add_argument("--model", type=Path, default=Path("models/demo"))
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--speed", type=float, default=4.0, help="times real time (a replay)")
    p.add_argument("--cuts", type=int, default=5)
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--seed", type=int, default=52)
    p.add_argument(
        "--workers", type=int, default=1, help="worker processes (2: resumes may be piped)"
    )
    p.add_argument("--reload", action="store_true", help="a SIGHUP reload per run, no cuts")
    add_server_args(p)
    add_json(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        audio = speech(args.seconds, args.seed, Path(folder))
    if args.reload:
        args.workers = max(args.workers, 2)
    options = ("--model", str(args.model), "--resume-grace-s", "30", "--workers", str(args.workers))
    server = spawn(ServerSpec((*options, "--log-level", "warning", *shlex.split(args.server_args))))
    try:
        measured = asyncio.run(measure(server.url, audio, args, server.proc))
    finally:
        server.stop()
    document = {
        "benchmark": "resume: a stream cut at random moments, resumed through a proxy",
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "audio_s": round(len(audio) / 2 / SR, 1),
        **measured,
        "summary": summary(measured),
        "machine": machine("cpus", "platform", "cpu", "python"),
    }
    print(write_json(args.json, document))
    return 0
