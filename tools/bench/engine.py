"""Engine throughput: audio-seconds per second, RTF and peak memory per batch size and length.

Per case it reports the end-to-end time (features + model + decoding), the model time
alone (`model_ms`, features computed beforehand), the activation peak on the device
against the cost model's price and the memory budget, and, in `targets`, the GPU goals
(10 s at batch 1 within 15 ms, 3000 audio-s/s at the best batch, memory within budget).

The command line is scripts/bench_engine.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.backends.graph_buckets import Bucketed
from engine.backends.registry import (
    BACKENDS,
    PRECISIONS,
    SWITCHES,
    BackendOptions,
    create_backend,
)
from engine.decoding.recognizer import Recognizer, Utterance
from engine.errors import BackendOutOfMemoryError
from engine.model.directory import resolve_model
from engine.serving.budget import CostModel
from engine.serving.builder import (
    EngineConfig,
    calibrated_cost,
    default_budget,
    peak_rss_bytes,
    reset_peak_rss,
)
from engine.serving.device_memory import DeviceMemory, device_memory
from engine.types import SAMPLE_RATE, DecodeOptions
from tools.bench.common.cli import add_json, parser_for
from tools.bench.common.output import machine, write_json
from tools.bench.common.speech import PASSAGE, stand_in_noise
from tools.speech import missing_tools, speak

# Goals for the full-size model in fp16 on one H200 (issues 9 and 37).
TARGET_BATCH1_10S_MS = 15.0
TARGET_BATCH1_10S_END_TO_END_MS = 25.0
TARGET_AUDIO_S_PER_S = 3000.0
TARGET_END_TO_END_AUDIO_S_PER_S = 5000.0


@dataclass(frozen=True, slots=True)
class Device:
    """What the cases run against: the recognizer, its memory reader, price and budget."""

    name: str
    recognizer: Recognizer
    memory: DeviceMemory
    cost: CostModel
    budget: int
    features: ThreadPoolExecutor | None


def speech_source(seconds: float) -> tuple[np.ndarray, str]:
    """Real espeak-ng speech looped to `seconds`, or noise when espeak-ng is missing."""
    if missing_tools():
        return stand_in_noise(seconds), "noise"
    speech = speak(PASSAGE * 3)
    reps = int(np.ceil(seconds * SAMPLE_RATE / len(speech)))
    return np.tile(speech, reps)[: int(seconds * SAMPLE_RATE)], "espeak-ng"


def cuda_peak(device: str, reset: bool) -> int | None:
    """The torch allocator's absolute peak on a GPU (weights included); None off a GPU."""
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    if reset:
        torch.cuda.reset_peak_memory_stats(device)
        return None
    return int(torch.cuda.max_memory_allocated(device))


def prepare(device: Device, clips: Sequence[np.ndarray]) -> list[Utterance]:
    """Features for every clip, on the feature threads when there are some."""
    options = DecodeOptions()
    if device.features is None:
        return [device.recognizer.prepare(c, options) for c in clips]
    return list(device.features.map(lambda c: device.recognizer.prepare(c, options), clips))


def time_model(device: Device, utts: Sequence[Utterance], repeats: int) -> tuple[float, int]:
    """Median seconds of the backend alone, and its activation peak on the device."""
    recognizer = device.recognizer
    backend = recognizer.backend
    # The model alone: features from the CPU frontend even where the backend would
    # compute them itself (that is in the end-to-end time).
    feats = [recognizer.features_of(u) for u in utts]
    options = [u.options for u in utts]
    device.memory.start_peak()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        backend.run(feats, options)  # returns host ids, so the device has finished
        times.append(time.perf_counter() - t0)
    return statistics.median(times), device.memory.peak_bytes()


def bench_case(
    device: Device, source: np.ndarray, batch: int, seconds: float, repeats: int
) -> dict[str, Any]:
    """Time one (batch, seconds) case: warm-up once, then the median of `repeats`."""
    n = int(seconds * SAMPLE_RATE)
    # Different offsets so the items of a batch are different speech of equal length.
    clips = [np.roll(source, -i * SAMPLE_RATE // 3)[:n] for i in range(batch)]
    recognizer = device.recognizer
    utts = prepare(device, clips)
    recognizer.decode(utts)
    model_s, peak = time_model(device, utts, repeats)
    reset_peak_rss()
    cuda_peak(device.name, reset=True)
    times, frontend_times = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        utts = prepare(device, clips)
        t1 = time.perf_counter()
        recognizer.decode(utts)
        frontend_times.append(t1 - t0)
        times.append(time.perf_counter() - t0)
    wall = statistics.median(times)
    audio = batch * seconds
    priced = device.cost.bytes(batch, recognizer.frontend.num_frames(n))
    return {
        "batch": batch,
        "seconds": seconds,
        "wall_s": round(wall, 4),
        "frontend_s": round(statistics.median(frontend_times), 4),
        "model_ms": round(model_s * 1000, 3),
        "audio_s_per_s": round(audio / wall, 2),
        "model_audio_s_per_s": round(audio / model_s, 2),
        "rtf": round(wall / audio, 5),
        "peak_rss_bytes": peak_rss_bytes(),
        "peak_cuda_bytes": cuda_peak(device.name, reset=False),
        "peak_device_bytes": peak,
        "priced_bytes": priced,
        "budget_bytes": device.budget,
        "within_price": peak <= priced,
        "admissible": priced <= device.budget,  # would the scheduler ever form this batch
        "within_budget": peak <= device.budget,
        "runs_s": [round(t, 4) for t in times],
    }


def warm_up(device: Device, source: np.ndarray, runs: int = 3) -> None:
    """The first runs of a process are slow (allocator, kernel selection, CUDA context)."""
    utts = prepare(device, [source[: 5 * SAMPLE_RATE]])
    for _ in range(runs):
        device.recognizer.decode(utts)


def targets(cases: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The GPU goals, read off the cases (None where a case that measures it is missing)."""
    ok = [c for c in cases if "error" not in c]
    one = [c for c in ok if c["batch"] == 1 and c["seconds"] == 10]
    best = max(ok, key=lambda c: c["model_audio_s_per_s"], default=None)
    batch1 = one[0]["model_ms"] if one else None
    batch1_wall = round(one[0]["wall_s"] * 1000, 3) if one else None
    end_to_end = max((c["audio_s_per_s"] for c in ok), default=None)
    return {
        "batch1_10s_model_ms": batch1,
        "batch1_10s_target_ms": TARGET_BATCH1_10S_MS,
        "batch1_10s_met": None if batch1 is None else batch1 <= TARGET_BATCH1_10S_MS,
        "batch1_10s_end_to_end_ms": batch1_wall,
        "batch1_10s_end_to_end_target_ms": TARGET_BATCH1_10S_END_TO_END_MS,
        "batch1_10s_end_to_end_met": None
        if batch1_wall is None
        else batch1_wall <= TARGET_BATCH1_10S_END_TO_END_MS,
        "best_model_audio_s_per_s": best and best["model_audio_s_per_s"],
        "best_end_to_end_audio_s_per_s": end_to_end,
        "end_to_end_target_audio_s_per_s": TARGET_END_TO_END_AUDIO_S_PER_S,
        "end_to_end_met": None
        if end_to_end is None
        else end_to_end >= TARGET_END_TO_END_AUDIO_S_PER_S,
        "best_batch": best and best["batch"],
        "audio_s_per_s_target": TARGET_AUDIO_S_PER_S,
        "audio_s_per_s_met": None
        if best is None
        else best["model_audio_s_per_s"] >= TARGET_AUDIO_S_PER_S,
        "memory_within_price": all(c["within_price"] for c in ok),
        "memory_within_budget": all(c["within_budget"] for c in ok if c["admissible"]),
        "max_peak_device_bytes": max((c["peak_device_bytes"] for c in ok), default=None),
    }


def parse_list(text: str, kind: type) -> list[Any]:
    return [kind(x) for x in text.split(",") if x]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = parser_for(__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--backend", choices=BACKENDS, default="onnx")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--batch", default="1,2,4,8,16")
    parser.add_argument("--seconds", default="3,10,30")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget-fraction", type=float, default=0.8)
    parser.add_argument("--feature-threads", type=int, default=1, help="parallel features")
    parser.add_argument("--device-features", choices=SWITCHES, default="auto")
    parser.add_argument("--cuda-graphs", choices=SWITCHES, default="auto")
    add_json(parser, required=True)
    return parser.parse_args(argv)


def open_device(args: argparse.Namespace) -> tuple[Device, float]:
    """Load, read free memory after the weights, calibrate: as the server's builder does."""
    model_dir = resolve_model(args.model)
    options = BackendOptions(
        args.backend,
        args.precision,
        args.device,
        args.threads,
        device_features=args.device_features,
        cuda_graphs=args.cuda_graphs,
    )
    started = time.perf_counter()
    recognizer = Recognizer(model_dir, create_backend(model_dir, options))
    load_s = time.perf_counter() - started
    config = EngineConfig(model=args.model, backend=options, budget_fraction=args.budget_fraction)
    memory = device_memory(args.device, args.backend)
    free = memory.free_bytes() if args.device.startswith("cuda") else None
    budget = default_budget(config, args.device, free)
    cost = calibrated_cost(recognizer, memory, config)
    pool = ThreadPoolExecutor(args.feature_threads) if args.feature_threads > 1 else None
    return Device(args.device, recognizer, memory, cost, budget, pool), load_s


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    device, load_s = open_device(args)
    recognizer = device.recognizer
    seconds = parse_list(args.seconds, float)
    source, source_kind = speech_source(max(seconds) + 10)
    warm_up(device, source)
    cases: list[dict[str, Any]] = []
    for secs in seconds:
        for batch in parse_list(args.batch, int):
            try:
                case = bench_case(device, source, batch, secs, args.repeats)
            except BackendOutOfMemoryError as exc:
                case = {"batch": batch, "seconds": secs, "error": f"out_of_memory: {exc}"}
            cases.append(case)
            print(json.dumps(case), flush=True)
    report = {
        "model": str(recognizer.model_dir.path),
        "test_model": recognizer.model_dir.test_model,
        "backend": recognizer.backend.name,
        "device": args.device,
        "threads": args.threads,
        "feature_threads": args.feature_threads,
        "features_on_device": recognizer.features_on_device,
        "graph_buckets": _graph_buckets(recognizer),
        "load_s": round(load_s, 2),
        "audio": source_kind,
        "memory_budget_bytes": device.budget,
        "cost_scale": round(device.cost.scale, 3),
        "machine": machine("cpus", "platform", "cpu"),
        "gpu": _gpu_name(args.device),
        "targets": targets(cases),
        "cases": cases,
    }
    write_json(args.json, report, indent=2)
    return 0


def _gpu_name(device: str) -> str | None:
    if not device.startswith("cuda"):
        return None
    import torch

    return str(torch.cuda.get_device_name(torch.device(device)))


def _graph_buckets(recognizer: Recognizer) -> int:
    backend = recognizer.backend
    plan = backend.graph_plan if isinstance(backend, Bucketed) else None
    return 0 if plan is None else len(plan.buckets)
