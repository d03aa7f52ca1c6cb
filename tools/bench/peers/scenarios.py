"""The engine scenarios both systems run, timed the same way in a process of their own.

A system is a `decode(clips) -> texts` callable that decodes its clips as one batch. Each
scenario warms up on its own first batch, then times the work; the process's peak RSS is
read at the end, so each scenario's process reports its own. Standard library and numpy
only: the sherpa worker imports this in a side environment.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
Decode = Callable[[list[np.ndarray]], list[str]]
#: name -> (batch size, length-sorted); "latency" is one 10 s clip, five times.
BATCHED = {
    "sequential": (1, False),
    "batch4": (4, False),
    "batch4_sorted": (4, True),
    "batch8": (8, False),
    "batch8_sorted": (8, True),
}
SCENARIOS = ("latency", *BATCHED)
LATENCY_S, LATENCY_RUNS = 10.0, 5


def groups(clips: Sequence[np.ndarray], size: int, by_length: bool) -> list[list[np.ndarray]]:
    """Batches of `size` in arrival order, or of similar length when `by_length`."""
    order = (
        sorted(range(len(clips)), key=lambda i: len(clips[i])) if by_length else range(len(clips))
    )
    ordered = [clips[i] for i in order]
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def run(decode: Decode, clips: Sequence[np.ndarray], scenario: str) -> dict[str, object]:
    """Time `scenario`; the result is JSON-ready."""
    if scenario == "latency":
        clip = _latency_clip(clips)
        decode([clip])
        times = []
        for _ in range(LATENCY_RUNS):
            started = time.perf_counter()
            texts = decode([clip])
            times.append(time.perf_counter() - started)
        return {"latency_s": float(np.median(times)), "runs_s": times, "texts": texts}
    size, by_length = BATCHED[scenario]
    batches = groups(clips, size, by_length)
    decode(batches[0])
    started = time.perf_counter()
    texts = [text for batch in batches for text in decode(batch)]
    wall = time.perf_counter() - started
    audio = sum(len(c) for c in clips) / SAMPLE_RATE
    return {"wall_s": wall, "audio_s": audio, "audio_s_per_s": audio / wall, "texts": texts}


def _latency_clip(clips: Sequence[np.ndarray]) -> np.ndarray:
    whole = np.concatenate(list(clips))
    return whole[: int(LATENCY_S * SAMPLE_RATE)]


def peak_rss_bytes(status: Path = Path("/proc/self/status")) -> int:
    """This process's peak resident set since it exec'd.

    Not getrusage's ru_maxrss: Linux carries that across fork and exec, so every worker
    would report at least its parent's size (the benchmark's, with torch loaded).
    VmHWM belongs to the address space, which exec replaces.
    """
    try:
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def worker_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clips", required=True, help="npz of float32 16 kHz clips")
    parser.add_argument("--scenario", choices=SCENARIOS, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", required=True)
    parser.add_argument("--tokens", default="", help="sherpa only")
    parser.add_argument("--precision", default="int8", help="ours only (sherpa's is the file)")
    return parser.parse_args(argv)


def load_clips(path: str) -> list[np.ndarray]:
    with np.load(path) as data:
        return [data[k].astype(np.float32) for k in sorted(data.files)]


def report(result: dict[str, object], load_s: float) -> None:
    """One JSON line on stdout: what the parent reads."""
    result |= {"load_s": load_s, "peak_rss_bytes": peak_rss_bytes()}
    sys.stdout.write(json.dumps(result) + "\n")
