"""scripts/soak.py: short sessions over a steady load, between two measurements at rest.

The load runs in two phases: a warm-up, after which the server's resources are read at
rest (the baseline), then the rest of the sessions, after which they are read at rest
again. Each reading at rest waits for /stats to report no session open.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sensestream.client import ClientError, Outcome, SessionOptions, converse, pcm16, split
from tools.http import http_base
from tools.soak.verdict import Level, Sample, at_rest, level, resource_checks, rss_growth
from tools.spawn import ServerSpec, spawn
from tools.speech import SAMPLE_RATE, speak
from tools.stats import StatsSampler

DESCRIPTION = "Soak: thousands of short sessions over a steady load; resources must come back."
SHORT_TEXT = "Hello, can you hear me?"
LONG_TEXT = (
    "This is a longer call that keeps streaming in real time while many short sessions "
    "come and go around it, to show that nothing leaks."
)
FRAME_BYTES = 3200  # 100 ms of pcm_s16le at 16 kHz
# glibc raises its mmap threshold each time a large block is freed, after which freed batch
# buffers stay in the heap: RSS at rest is then the high-water mark of the largest batch so
# far, not what is still in use (two 150-session runs: +1.7% and +26% from rest to rest).
# A fixed threshold hands them back, so RSS at rest tracks live memory (three runs: +-2%).
SOAK_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


@dataclass
class Tally:
    """What the clients saw."""

    done: int = 0
    errors: list[str] = field(default_factory=list)
    finals: int = 0


def speech_frames(text: str) -> list[bytes]:
    """One espeak-ng utterance with silence around it, as 100 ms s16le frames."""
    lead, tail = np.zeros(SAMPLE_RATE // 4, np.float32), np.zeros(SAMPLE_RATE, np.float32)
    return split(pcm16(np.concatenate([lead, speak(text), tail])), FRAME_BYTES)


async def one_session(url: str, frames: Sequence[bytes], real_time: bool, tally: Tally) -> None:
    pace = "live" if real_time else "replay"
    options = SessionOptions(start={"type": "start", "pace": pace}, speed=float(real_time))
    outcome = Outcome()
    try:
        await converse(url, frames, options, outcome)
    except ClientError as exc:
        tally.errors.append(exc.code)
    else:
        if outcome.close_code != 1000:
            tally.errors.append(f"close {outcome.close_code}")
    tally.finals += len(outcome.of("final"))
    tally.errors.extend(str(e.get("code")) for e in outcome.of("error"))
    tally.done += 1


@dataclass(frozen=True, slots=True)
class Load:
    """The soak's clients: short replayed sessions beside long real-time ones."""

    url: str
    short: tuple[bytes, ...]
    long: tuple[bytes, ...]
    concurrency: int
    steady: int


async def phase(load: Load, sessions: int, tally: Tally, steady_tally: Tally) -> None:
    """`sessions` short sessions, `concurrency` at a time, with the steady ones alongside."""
    stop = asyncio.Event()

    async def steady() -> None:
        while not stop.is_set():
            await one_session(load.url, load.long, True, steady_tally)

    steady_tasks = [asyncio.create_task(steady()) for _ in range(load.steady)]
    gate = asyncio.Semaphore(load.concurrency)

    async def guarded() -> None:
        async with gate:
            await one_session(load.url, load.short, False, tally)

    await asyncio.gather(*(guarded() for _ in range(sessions)))
    stop.set()
    await asyncio.gather(*steady_tasks)


async def rest_level(sampler: StatsSampler, timeout_s: float) -> Level | None:
    """The server's resources once it is at rest (None if it never was within the time)."""
    since = time.monotonic()

    def window() -> list[Sample] | None:
        samples = [s for r in sampler.readings if (s := Sample.of(r)) is not None]
        return at_rest(samples, since)

    if not await sampler.until(lambda _: window() is not None, timeout_s):
        return None
    found = window()
    return level(found) if found else None


async def soak(args: argparse.Namespace, url: str) -> dict[str, Any]:
    http_url = http_base(url)
    short, long = speech_frames(SHORT_TEXT), speech_frames(LONG_TEXT)
    load = Load(url, tuple(short), tuple(long), args.concurrency, args.steady)
    tally, steady_tally = Tally(), Tally()
    async with StatsSampler(http_url, None, args.sample_every) as sampler:
        started = time.monotonic()
        await phase(load, args.warmup, tally, steady_tally)
        baseline = await rest_level(sampler, args.rest_timeout)
        await phase(load, args.sessions - args.warmup, tally, steady_tally)
        final = await rest_level(sampler, args.rest_timeout)
        elapsed = time.monotonic() - started
        timeline = [s for r in sampler.readings if (s := Sample.of(r)) is not None]
    return report(
        args, baseline=baseline, final=final, timeline=timeline,
        tally=tally, steady=steady_tally, elapsed=elapsed,
    )  # fmt: skip


def report(
    args: argparse.Namespace,
    *,
    baseline: Level | None,
    final: Level | None,
    timeline: Sequence[Sample],
    tally: Tally,
    steady: Tally,
    elapsed: float,
) -> dict[str, Any]:
    at_rest_both = baseline is not None and final is not None
    checks = {"at_rest": at_rest_both}
    if baseline is not None and final is not None:
        checks |= resource_checks(baseline, final, args.max_rss_growth)
    checks |= {
        "no_errors": not tally.errors and not steady.errors,
        "all_done": tally.done == args.sessions,
    }
    t0 = timeline[0].t if timeline else 0.0
    return {
        "sessions": args.sessions,
        "concurrency": args.concurrency,
        "steady_sessions": args.steady,
        "elapsed_s": round(elapsed, 1),
        "finals": tally.finals,
        "steady_finals": steady.finals,
        "errors": tally.errors[:20] + steady.errors[:20],
        "baseline": relative(baseline, t0),
        "final": relative(final, t0),
        "rss_growth": round(rss_growth(baseline, final), 4) if baseline and final else None,
        "checks": checks,
        "ok": all(checks.values()),
        "timeline": [{**asdict(s), "t": round(s.t - t0, 2)} for s in timeline],
    }


def relative(rest: Level | None, t0: float) -> dict[str, Any] | None:
    """A level for the JSON, its time on the timeline's clock."""
    return None if rest is None else {**asdict(rest), "t": round(rest.t - t0, 2)}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--url")
    parser.add_argument("--spawn-server", metavar="MODEL_DIR")
    parser.add_argument("--server-args", default="--precision fp32 --max-batch 8")
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--steady", type=int, default=4, help="long real-time sessions alongside")
    parser.add_argument("--warmup", type=int, default=200, help="sessions before the baseline")
    parser.add_argument("--sample-every", type=float, default=1.0, help="seconds between /stats")
    parser.add_argument(
        "--rest-timeout", type=float, default=60.0, help="for the server to be at rest"
    )
    parser.add_argument("--max-rss-growth", type=float, default=0.10)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if not args.url and not args.spawn_server:
        parser.error("give --url or --spawn-server")
    args.warmup = max(1, min(args.warmup, args.sessions - 1))
    return args


def server_spec(args: argparse.Namespace) -> ServerSpec:
    # Every client comes from this one address: lift the per-address cap above the load.
    # Twice, because the server counts a session until its handler has finished, a moment
    # after the client has seen the close and started its next one.
    cap = str(2 * (args.concurrency + args.steady))
    limits = ("--max-sessions-per-ip", cap, "--max-sessions", cap)
    args_ = ("--model", args.spawn_server, *limits, *args.server_args.split())
    return ServerSpec(args_, env={**SOAK_ENV, **os.environ})


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.spawn_server:
        with spawn(server_spec(args)) as server:
            result = asyncio.run(soak(args, server.url))
    else:
        result = asyncio.run(soak(args, args.url))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    summary = {k: result[k] for k in ("elapsed_s", "finals", "rss_growth", "checks", "ok")}
    print(json.dumps(summary, indent=2))
    return 0 if result["ok"] else 1
