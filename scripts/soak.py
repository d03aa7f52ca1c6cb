"""Soak: thousands of short sessions over a steady concurrent load; resources must stay flat.

It records the server's RSS, open fds, threads and asyncio tasks (from /stats) over time,
takes a baseline after warm-up, and checks that at the end RSS grew by less than
`--max-rss-growth` and fds, threads and tasks are back at the baseline.

Examples:
    python scripts/soak.py --spawn-server models/test-tiny --sessions 2000 --concurrency 50 \
        --json benchmarks/soak.json
    python scripts/soak.py --url ws://127.0.0.1:8765/ws --sessions 200 --concurrency 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from engine.audio_io import read_audio

SR = 16000
BASELINE_WINDOW_S = 10.0
SETTLED_SAMPLES = 5
REPO = Path(__file__).resolve().parent.parent


@dataclass
class Tally:
    """What the clients saw."""

    done: int = 0
    errors: list[str] = field(default_factory=list)
    finals: int = 0


def speech_pcm(text: str) -> bytes:
    """One espeak-ng utterance with silence around it, as 16 kHz s16le."""
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "speech.wav"
        subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(wav), text], check=True)
        speech = read_audio(wav)
    audio = np.concatenate([np.zeros(SR // 4, np.float32), speech, np.zeros(SR, np.float32)])
    return (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()


async def one_session(url: str, audio: bytes, pace: str, tally: Tally, real_time: bool) -> None:
    try:
        async with connect(url, compression=None) as ws:
            await ws.send(json.dumps({"type": "start", "pace": pace}))
            for at in range(0, len(audio), 3200):
                await ws.send(audio[at : at + 3200])
                if real_time:
                    await asyncio.sleep(0.1)
            await ws.send(json.dumps({"type": "stop"}))
            async for message in ws:
                event = json.loads(message)
                if event["type"] == "final":
                    tally.finals += 1
                elif event["type"] == "error":
                    tally.errors.append(event["code"])
            if ws.close_code != 1000:
                tally.errors.append(f"close {ws.close_code}")
    except ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd is not None else None
        tally.errors.append(f"closed {code}")
    except OSError as exc:
        tally.errors.append(type(exc).__name__)
    tally.done += 1


def stats(base: str) -> dict[str, Any]:
    with urllib.request.urlopen(base + "/stats", timeout=10) as r:
        data = json.loads(r.read())
    p = data["process"]
    return {
        "t": time.monotonic(),
        "rss": p["rss_bytes"],
        "fds": p["open_fds"],
        "threads": p["threads"],
        "tasks": data["asyncio_tasks"],
        "sessions": data["sessions"],
    }


async def sample_forever(base: str, samples: list[dict[str, Any]], every: float) -> None:
    while True:
        samples.append(await asyncio.to_thread(stats, base))
        await asyncio.sleep(every)  # a sampling period, not a wait for a condition


async def soak(args: argparse.Namespace, url: str) -> dict[str, Any]:
    base = url.replace("ws://", "http://").rsplit("/ws", 1)[0]
    short = speech_pcm("Hello, can you hear me?")
    long = speech_pcm(
        "This is a longer call that keeps streaming in real time while many short sessions "
        "come and go around it, to show that nothing leaks."
    )
    tally, steady_tally = Tally(), Tally()
    samples: list[dict[str, Any]] = []
    sampler = asyncio.create_task(sample_forever(base, samples, args.sample_every))
    stop_steady = asyncio.Event()

    async def steady() -> None:
        while not stop_steady.is_set():
            await one_session(url, long, "live", steady_tally, real_time=True)

    steady_tasks = [asyncio.create_task(steady()) for _ in range(args.steady)]
    gate = asyncio.Semaphore(args.concurrency)
    baseline: dict[str, Any] = {}

    async def guarded(i: int) -> None:
        async with gate:
            await one_session(url, short, "replay", tally, real_time=False)
        if i == args.warmup and not baseline:
            baseline.update(await asyncio.to_thread(stats, base))

    started = time.monotonic()
    await asyncio.gather(*(guarded(i) for i in range(args.sessions)))
    stop_steady.set()
    await asyncio.gather(*steady_tasks)
    await asyncio.sleep(args.settle)  # let the server close the last sockets
    settled = []
    for _ in range(SETTLED_SAMPLES):
        settled.append(await asyncio.to_thread(stats, base))
        await asyncio.sleep(0.5)  # a sampling period, not a wait for a condition
    final = {**settled[-1], "rss": int(statistics.median(s["rss"] for s in settled))}
    sampler.cancel()
    elapsed = time.monotonic() - started
    return report(
        args,
        baseline=baseline,
        final=final,
        samples=samples,
        tally=tally,
        steady=steady_tally,
        elapsed=elapsed,
    )


def report(
    args: argparse.Namespace,
    *,
    baseline: dict[str, Any],
    final: dict[str, Any],
    samples: list[dict[str, Any]],
    tally: Tally,
    steady: Tally,
    elapsed: float,
) -> dict[str, Any]:
    # RSS jumps for a moment with each batch in flight; a leak is what stays. Both ends
    # are medians: of the samples in the window after warm-up, and of the settled ones.
    window = [x["rss"] for x in samples if 0 <= x["t"] - baseline["t"] <= BASELINE_WINDOW_S]
    baseline = {**baseline, "rss": int(statistics.median(window or [baseline["rss"]]))}
    growth = (final["rss"] - baseline["rss"]) / baseline["rss"]
    checks = {
        "rss_growth_ok": growth < args.max_rss_growth,
        "fds_back": final["fds"] <= baseline["fds"],
        "threads_back": final["threads"] <= baseline["threads"],
        "tasks_back": final["tasks"] <= baseline["tasks"],
        "no_errors": not tally.errors and not steady.errors,
        "all_done": tally.done == args.sessions,
    }
    t0 = samples[0]["t"] if samples else 0.0
    return {
        "sessions": args.sessions,
        "concurrency": args.concurrency,
        "steady_sessions": args.steady,
        "elapsed_s": round(elapsed, 1),
        "finals": tally.finals,
        "steady_finals": steady.finals,
        "errors": tally.errors[:20] + steady.errors[:20],
        "baseline": baseline,
        "final": final,
        "rss_growth": round(growth, 4),
        "checks": checks,
        "ok": all(checks.values()),
        "timeline": [{**s, "t": round(s["t"] - t0, 2)} for s in samples],
    }


def spawn(model: str, extra: list[str]) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "server", "--model", model, "--port", "0", *extra]
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    url = ""
    if proc.stdout is None:
        raise RuntimeError("no server output")
    for line in proc.stdout:
        match = re.search(r"(ws://[\d.]+:\d+/ws)", line)
        if match and "listening" in line:
            url = match.group(1)
        if "ready in" in line:
            break
    if not url:
        raise RuntimeError("server did not start")
    # Keep draining its output so a full pipe never blocks the server.
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc, url


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--spawn-server", metavar="MODEL_DIR")
    parser.add_argument("--server-args", default="--precision fp32 --max-batch 8")
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--steady", type=int, default=4, help="long real-time sessions alongside")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--sample-every", type=float, default=1.0)
    parser.add_argument("--max-rss-growth", type=float, default=0.10)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.warmup = min(args.warmup, args.sessions - 1)
    proc = None
    url = args.url
    if args.spawn_server:
        # Every client comes from this one address: lift the per-address cap above the
        # load. Twice, because the server counts a session until its handler has finished,
        # a moment after the client has seen the close and started its next one.
        cap = str(2 * (args.concurrency + args.steady))
        limits = ["--max-sessions-per-ip", cap, "--max-sessions", cap]
        proc, url = spawn(args.spawn_server, [*limits, *args.server_args.split()])
    if not url:
        parser.error("give --url or --spawn-server")
    try:
        result = asyncio.run(soak(args, url))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    summary = {k: result[k] for k in ("elapsed_s", "finals", "rss_growth", "checks", "ok")}
    print(json.dumps(summary, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
