"""The cost run: decode time with confidence on against off (see the package's docstring)."""

from __future__ import annotations

import gc
import json
import os
import statistics
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from engine.decoding.recognizer import Utterance
from engine.types import FRAME_MS, Transcript
from tools.bench.common.output import machine
from tools.bench.confidence.accuracy import Engine, open_engine, utterance
from tools.bench.confidence.metrics import COST_BACKENDS, COST_SECONDS, PLAIN, SCORED
from tools.bench.hotwords import linked_model
from tools.demo_model.evaluate import EvalItem, eval_sets


def cost_items(sets: dict[str, list[EvalItem]], size: int) -> list[EvalItem]:
    """`size` utterances of 3-6 s, held_out and unseen_voice in turn (the same for every
    case: batch 1 is the first)."""
    lo, hi = (s * 1000 / FRAME_MS for s in COST_SECONDS)
    pools = [
        [i for i in sets[n] if lo <= i.feats.shape[0] <= hi] for n in ("held_out", "unseen_voice")
    ]
    mixed = [i for pair in zip(*pools, strict=False) for i in pair]
    if len(mixed) < size:
        raise SystemExit(f"only {len(mixed)} utterances of 3-6 s; raise --count")
    return mixed[:size]


def scored_all(transcripts: Sequence[Transcript]) -> bool:
    """Whether the decode was scored: tokens there, and every one with a log-probability."""
    tokens = [t for tr in transcripts for t in tr.tokens]
    return bool(tokens) and all(t.logprob is not None for t in tokens)


def timed_turns(
    engine: Engine, batches: dict[str, list[Utterance]], repeats: int
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, list[Transcript]]]:
    """Each batch decoded `repeats` times, taking turns (which goes first alternates): the
    wall seconds and the process's CPU seconds of every decode, and the last transcripts."""
    wall: dict[str, list[float]] = {name: [] for name in batches}
    cpu: dict[str, list[float]] = {name: [] for name in batches}
    last = {}
    for r in range(repeats):
        for name in list(batches) if r % 2 == 0 else list(batches)[::-1]:
            t0, c0 = time.perf_counter(), time.process_time()
            last[name] = engine.recognizer.decode(batches[name])
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    return wall, cpu, last


def on_off(engine: Engine, items: Sequence[EvalItem], repeats: int) -> dict[str, Any]:
    """The same batch decoded without and with confidence, taking turns, after one warm-up
    decode each: medians and fastest (wall), median CPU seconds, ratios, and checks."""
    batches = {
        "off": [utterance(i, PLAIN) for i in items],
        "on": [utterance(i, SCORED) for i in items],
    }
    for batch in batches.values():
        engine.recognizer.decode(batch)
    load_before = os.getloadavg()[0]
    wall, cpu, last = timed_turns(engine, batches, repeats)
    off, on = statistics.median(wall["off"]), statistics.median(wall["on"])
    cpu_off, cpu_on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
    return {
        "batch": len(items),
        "audio_s": round(sum(i.feats.shape[0] for i in items) * FRAME_MS / 1000, 2),
        "off_s": round(off, 4),
        "on_s": round(on, 4),
        "ratio": round(on / off, 3),
        "fastest_ratio": round(min(wall["on"]) / min(wall["off"]), 3),
        "cpu_off_s": round(cpu_off, 4),
        "cpu_on_s": round(cpu_on, 4),
        "cpu_ratio": round(cpu_on / cpu_off, 3),
        "off_all_s": [round(t, 4) for t in wall["off"]],
        "on_all_s": [round(t, 4) for t in wall["on"]],
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "on_scored": scored_all(last["on"]),
        "off_scored": scored_all(last["off"]),
        "same_text": [t.text for t in last["on"]] == [t.text for t in last["off"]],
        "tokens_per_item": round(statistics.fmean(len(t.tokens) for t in last["on"]), 1),
    }


def cost_model(model: Path, args: Any, items: Sequence[EvalItem]) -> Iterator[dict[str, Any]]:
    """Every backend and batch size on one model, one backend open at a time."""
    with linked_model(model) as view:
        for backend, precision in COST_BACKENDS:
            engine = open_engine(view, backend, precision, args.threads)
            for size in args.batches:
                row: dict[str, Any] = {
                    "model": str(model),
                    "backend": engine.label,
                    "precision": precision,
                }
                row |= on_off(engine, items[:size], args.repeats)
                row["scored_ready_s"] = round(engine.scored_ready_s, 1)
                print(
                    json.dumps({k: v for k, v in row.items() if not k.endswith("all_s")}),
                    flush=True,
                )
                yield row
            del engine
            gc.collect()


def run_cost(args: Any) -> dict[str, Any]:
    """The cost of confidence on every model, backend and batch size."""
    models = [Path(m).expanduser() for m in args.cost_models.split(",")]
    for model in models:
        if not model.is_dir():
            raise SystemExit(
                f"no model at {model} (scripts/make_test_model.py --size full --out {model})"
            )
    items = cost_items(eval_sets(args.seed, args.count), max(args.batches))
    rows = [row for model in models for row in cost_model(model, args, items)]
    return {
        "config": {
            "models": [str(m) for m in models],
            "backends": [f"{b}-{p}" for b, p in COST_BACKENDS],
            "threads": args.threads,
            "batches": args.batches,
            "repeats": args.repeats,
            "off": "DecodeOptions()",
            "on": "DecodeOptions(confidence=True)",
            "utterances": [i.sentence.written for i in items],
            "seed": args.seed,
        },
        "machine": machine("cpus", "platform", "cpu", "python"),
        "cases": rows,
    }
