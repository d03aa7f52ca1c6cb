"""int8 recipes on this CPU: speed and frame agreement with fp32, side by side.

Each recipe quantizes the model's fp32 export (`model.onnx`) with onnxruntime's dynamic
quantizer; all sessions then decode the same espeak clips one at a time, the recipes
taking turns over the passes, and each clip's frame argmaxes are held against fp32's.
Unsigned per-tensor weights are the export's recipe (`engine/backends/onnx_export.py`); signed
weights saturate the u8 x s8 kernels of CPUs without VNNI unless `reduce_range` keeps
them to 7 bits. The `w8-`/`w4-` recipes are weight-only, blockwise (onnxruntime's
MatMulNBits at accuracy level 4, whose int8 kernels use VNNI or AMX where the CPU has
them); on AVX2 they lost to the export's recipe (`docs/benchmarks.md`).

The command line is scripts/bench_int8_recipes.py.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.backends.registry import ensure_onnx
from engine.features.fbank import Frontend
from engine.model.directory import resolve_model
from engine.model.prompts import prompt_arrays
from engine.types import DecodeOptions
from tools.bench.common.cli import add_json, parser_for
from tools.bench.common.output import machine, write_json
from tools.bench.common.rounds import in_turn
from tools.bench.common.speech import make_clips


@dataclass(frozen=True, slots=True)
class Recipe:
    name: str
    signed: bool
    per_channel: bool
    reduce_range: bool
    # Weight-only blockwise quantization (MatMulNBits) when `bits` is set; the flags
    # above are then unused.
    bits: int = 0
    block: int = 0


RECIPES = (
    Recipe("u8-per-tensor (export)", False, False, False),
    Recipe("u8-per-channel", False, True, False),
    Recipe("s8-per-tensor", True, False, False),
    Recipe("s8-per-channel", True, True, False),
    Recipe("s8-reduce-range", True, False, True),
    Recipe("s8-reduce-range-per-channel", True, True, True),
    Recipe("w8-block128", False, False, False, bits=8, block=128),
    Recipe("w4-block32", False, False, False, bits=4, block=32),
)


def quantize(src: Path, dst: Path, recipe: Recipe) -> Path:
    """`src` quantized by `recipe` into `dst` (kept: quantizing takes about 20 s)."""
    if dst.is_file():
        return dst
    if recipe.bits:
        return quantize_blockwise(src, dst, recipe)
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.disable(logging.WARNING)  # the quantizer logs a line per tensor
    try:
        quantize_dynamic(
            str(src),
            str(dst),
            op_types_to_quantize=["MatMul"],
            per_channel=recipe.per_channel,
            reduce_range=recipe.reduce_range,
            weight_type=QuantType.QInt8 if recipe.signed else QuantType.QUInt8,
        )
    finally:
        logging.disable(logging.NOTSET)
    return dst


def quantize_blockwise(src: Path, dst: Path, recipe: Recipe) -> Path:
    """`src`'s constant-weight MatMuls as MatMulNBits with int8 compute, into `dst`."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    config = DefaultWeightOnlyQuantConfig(
        block_size=recipe.block, is_symmetric=False, accuracy_level=4, bits=recipe.bits
    )
    quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), algo_config=config)
    logging.disable(logging.WARNING)  # a line per tensor here too
    try:
        quantizer.process()
    finally:
        logging.disable(logging.NOTSET)
    partial = dst.with_suffix(".tmp")
    quantizer.model.save_model_to_file(str(partial), use_external_data_format=False)
    partial.replace(dst)
    return dst


def chosen_recipes(names: str) -> tuple[Recipe, ...]:
    """The export's recipe first (speeds are relative to it), then the asked-for others."""
    if not names:
        return RECIPES
    by_slug = {recipe.name.split(" ")[0]: recipe for recipe in RECIPES}
    unknown = [name for name in names.split(",") if name not in by_slug]
    if unknown:
        raise SystemExit(f"unknown recipe(s) {unknown}; known: {sorted(by_slug)}")
    asked = dict.fromkeys(by_slug[name] for name in names.split(","))  # once each, in order
    return (RECIPES[0], *[recipe for recipe in asked if recipe != RECIPES[0]])


def load_clips(path: Path) -> list[np.ndarray]:
    """Clips from an npz of int16 or float32 arrays, in key order, as float32."""
    with np.load(path) as data:
        arrays = [data[key] for key in sorted(data.files)]
    if not arrays:
        raise SystemExit(f"{path} holds no clips")
    odd = sorted({str(a.dtype) for a in arrays if a.dtype not in (np.int16, np.float32)})
    if odd:
        raise SystemExit(f"{path}: clips must be int16 or float32 samples, not {odd}")
    return [
        a.astype(np.float32) / 32768 if a.dtype == np.int16 else a.astype(np.float32)
        for a in arrays
    ]


def session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def argmaxes(sess: Any, feats: np.ndarray, prompts: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    lang, norm = prompts
    feed = {
        "speech": feats[np.newaxis],
        "speech_lengths": np.array([len(feats)], np.int32),
        "language": lang,
        "textnorm": norm,
    }
    ids, lens = sess.run(None, feed)
    result: np.ndarray = ids[0, : lens[0]]
    return result


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = parser_for(__doc__)
    parser.add_argument("--model", required=True, help="model dir with model.onnx (fp32)")
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache/sensestream/int8")
    parser.add_argument("--clips", type=int, default=20)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--recipes", default="", help="comma-separated recipe names (default: all)")
    parser.add_argument(
        "--clips-npz",
        type=Path,
        default=None,
        help="16 kHz clips saved by tools.bench.common.speech.save_clips (hosts without espeak-ng)",
    )
    add_json(parser, required=True)
    return parser.parse_args(argv)


def time_sessions(
    sessions: dict[str, Any], feats: list[np.ndarray], passes: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Seconds per session over all passes, taking turns, and frame agreement with fp32."""
    prompts = prompt_arrays([DecodeOptions()])
    reference = [argmaxes(sessions["fp32"], f, prompts) for f in feats]
    seconds = dict.fromkeys(sessions, 0.0)
    agreement: dict[str, float] = {}
    for number in range(passes):
        for name in in_turn(list(sessions), number):
            started = time.perf_counter()
            out = [argmaxes(sessions[name], f, prompts) for f in feats]
            seconds[name] += time.perf_counter() - started
            agreement[name] = float(
                np.mean([np.mean(a == b) for a, b in zip(out, reference, strict=True)])
            )
    return seconds, agreement


def main(argv: Sequence[str] | None = None) -> int:
    import onnxruntime as ort

    args = parse_args(argv)
    recipes = chosen_recipes(args.recipes)
    model_dir = resolve_model(args.model)
    ensure_onnx(model_dir, "fp32")  # the export every recipe quantizes
    fp32 = model_dir.path / "model.onnx"
    args.work.mkdir(parents=True, exist_ok=True)
    paths = {"fp32": fp32}
    for recipe in recipes:
        slug = recipe.name.split(" ")[0]
        paths[recipe.name] = quantize(
            fp32, args.work / f"{model_dir.path.name}-{slug}.onnx", recipe
        )
    frontend = Frontend.from_model_dir(model_dir.path)
    clips = load_clips(args.clips_npz) if args.clips_npz else make_clips()
    feats = [frontend.features(c) for c in clips[: args.clips]]
    sessions = {name: session(path, args.threads) for name, path in paths.items()}
    seconds, agreement = time_sessions(sessions, feats, args.passes)
    rows = [
        {
            "recipe": name,
            "seconds": round(seconds[name], 2),
            "speed_over_export": round(seconds[recipes[0].name] / seconds[name], 3),
            "frame_agreement_with_fp32": round(agreement[name], 4),
        }
        for name in sessions
    ]
    for row in rows:
        print(json.dumps(row))
    report = machine("cpu") | {"onnxruntime": ort.__version__, "model": str(model_dir.path)}
    report |= {"clips": len(feats), "passes": args.passes, "threads": args.threads, "rows": rows}
    write_json(args.json, report, indent=1)
    return 0
