"""Engine throughput: audio-seconds per second, RTF and peak memory per batch size and length.

Example:
    python scripts/bench_engine.py --model models/test-full --backend onnx --precision int8 \
        --batch 1,2,4,8,16 --seconds 3,10,30 --json benchmarks/engine-onnx-int8.json
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine.audio_io import read_audio
from engine.builder import peak_rss_bytes, reset_peak_rss
from engine.loader import BACKENDS, PRECISIONS, BackendOptions, create_backend
from engine.model_dir import resolve_model
from engine.recognizer import Recognizer
from engine.types import SAMPLE_RATE, DecodeOptions

PASSAGE = (
    "Streaming speech recognition turns live audio into text while a person is still "
    "talking. Call centres record many conversations at once, and each one must be decoded "
    "quickly and kept apart from the others. The final result arrives soon after the "
    "speaker stops, with the language, the emotion and any sound events that were heard. "
)


def speech_source(seconds: float) -> tuple[np.ndarray, str]:
    """Real espeak-ng speech looped to `seconds`, or noise when espeak-ng is missing."""
    if shutil.which("espeak-ng") is None:
        rng = np.random.default_rng(0)
        return (0.1 * rng.standard_normal(int(seconds * SAMPLE_RATE))).astype(np.float32), "noise"
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "passage.wav"
        subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(wav), PASSAGE * 3], check=True)
        speech = read_audio(wav)
    reps = int(np.ceil(seconds * SAMPLE_RATE / len(speech)))
    return np.tile(speech, reps)[: int(seconds * SAMPLE_RATE)], "espeak-ng"


def cuda_peak(reset: bool) -> int | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    if reset:
        torch.cuda.reset_peak_memory_stats()
        return None
    return int(torch.cuda.max_memory_allocated())


def bench_case(
    recognizer: Recognizer, source: np.ndarray, batch: int, seconds: float, repeats: int
) -> dict[str, Any]:
    """Time one (batch, seconds) case: warm-up once, then the median of `repeats`."""
    n = int(seconds * SAMPLE_RATE)
    # Different offsets so the items of a batch are different speech of equal length.
    clips = [np.roll(source, -i * SAMPLE_RATE // 3)[:n] for i in range(batch)]
    options = DecodeOptions()
    utts = [recognizer.prepare(c, options) for c in clips]
    recognizer.decode(utts)
    reset_peak_rss()
    cuda_peak(reset=True)
    times, frontend_times = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        utts = [recognizer.prepare(c, options) for c in clips]
        t1 = time.perf_counter()
        recognizer.decode(utts)
        t2 = time.perf_counter()
        frontend_times.append(t1 - t0)
        times.append(t2 - t0)
    wall = statistics.median(times)
    audio = batch * seconds
    return {
        "batch": batch,
        "seconds": seconds,
        "wall_s": round(wall, 4),
        "frontend_s": round(statistics.median(frontend_times), 4),
        "audio_s_per_s": round(audio / wall, 2),
        "rtf": round(wall / audio, 5),
        "peak_rss_bytes": peak_rss_bytes(),
        "peak_cuda_bytes": cuda_peak(reset=False),
        "runs_s": [round(t, 4) for t in times],
    }


def parse_list(text: str, kind: type) -> list[Any]:
    return [kind(x) for x in text.split(",") if x]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--backend", choices=BACKENDS, default="onnx")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--batch", default="1,2,4,8,16")
    parser.add_argument("--seconds", default="3,10,30")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)

    model_dir = resolve_model(args.model)
    options = BackendOptions(args.backend, args.precision, args.device, args.threads)
    started = time.perf_counter()
    recognizer = Recognizer(model_dir, create_backend(model_dir, options))
    load_s = time.perf_counter() - started
    seconds = parse_list(args.seconds, float)
    source, source_kind = speech_source(max(seconds) + 10)
    cases = []
    for secs in seconds:
        for batch in parse_list(args.batch, int):
            case = bench_case(recognizer, source, batch, secs, args.repeats)
            cases.append(case)
            print(json.dumps(case), flush=True)
    report = {
        "model": str(model_dir.path),
        "test_model": model_dir.test_model,
        "backend": recognizer.backend.name,
        "threads": args.threads,
        "load_s": round(load_s, 2),
        "audio": source_kind,
        "machine": {"cpus": _cpu_count(), "platform": platform.platform()},
        "cases": cases,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    raise SystemExit(main())
