"""Export the encoder, CTC head and argmax to ONNX (fp32), then int8 and fp16 variants."""

from __future__ import annotations

import logging
import os
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from engine.backends.onnx import SCORED_OUTPUT_NAMES
from engine.model.directory import ModelDir, onnx_name
from engine.model.network import FEATURE_DIM, CtcTopK, load_ctc_argmax

INPUT_NAMES = ("speech", "speech_lengths", "language", "textnorm")
OUTPUT_NAMES = ("token_ids", "token_lens")
OPSET = 17


def export_onnx(
    model_dir: ModelDir,
    out_dir: Path | None = None,
    *,
    int8: bool = False,
    fp16: bool = False,
    scored: bool = False,
) -> dict[str, Path]:
    """Write model.onnx (and the asked-for variants) and return them by precision; with
    `scored`, the graphs that also output each frame's best candidates (for hotwords)."""
    target = out_dir or model_dir.path
    target.mkdir(parents=True, exist_ok=True)
    fp32 = target / onnx_name("fp32", scored)
    _export_fp32(model_dir, fp32, scored)
    written = {"fp32": fp32}
    written.update(derive_variants(fp32, target, int8=int8, fp16=fp16, scored=scored))
    return written


def derive_variants(
    fp32: Path, target: Path, *, int8: bool, fp16: bool, scored: bool = False
) -> dict[str, Path]:
    """Make the int8 and/or fp16 files from an fp32 export."""
    written: dict[str, Path] = {}
    if int8:
        written["int8"] = target / onnx_name("int8", scored)
        _atomic(written["int8"], lambda tmp: quantize_int8(fp32, tmp))
    if fp16:
        written["fp16"] = target / onnx_name("fp16", scored)
        _atomic(written["fp16"], lambda tmp: convert_fp16(fp32, tmp))
    return written


def _export_fp32(model_dir: ModelDir, path: Path, scored: bool = False) -> None:
    axes = {
        "speech": {0: "batch", 1: "frames"},
        "speech_lengths": {0: "batch"},
        "language": {0: "batch"},
        "textnorm": {0: "batch"},
        "token_ids": {0: "batch", 1: "out_frames"},
        "token_lens": {0: "batch"},
    }
    argmax = load_ctc_argmax(model_dir)
    model: torch.nn.Module = argmax
    outputs: tuple[str, ...] = OUTPUT_NAMES
    if scored:
        model, outputs = CtcTopK(argmax), OUTPUT_NAMES + SCORED_OUTPUT_NAMES
        axes |= {name: {0: "batch", 1: "out_frames"} for name in SCORED_OUTPUT_NAMES}
    _atomic(
        path,
        lambda tmp: trace_to_onnx(
            model, tmp, input_names=INPUT_NAMES, output_names=outputs, axes=axes, opset=OPSET
        ),
    )


def trace_to_onnx(
    module: torch.nn.Module,
    path: Path,
    *,
    input_names: Sequence[str],
    output_names: Sequence[str],
    axes: Mapping[str, Mapping[int, str]],
    opset: int,
) -> None:
    """Export a module that takes SenseVoice's four inputs (features, lengths, language,
    text norm) with the TorchScript exporter."""
    # Two items of different lengths so the exporter sees real padding and masks.
    dummy = (
        torch.randn(2, 30, FEATURE_DIM),
        torch.tensor([30, 17], dtype=torch.int32),
        torch.tensor([0, 4], dtype=torch.int32),
        torch.tensor([14, 15], dtype=torch.int32),
    )
    with torch.inference_mode(), warnings.catch_warnings():
        # The exporter warns once per Slice it cannot fold; the graph is still right.
        warnings.filterwarnings("ignore", message="Constant folding", category=UserWarning)
        # dynamo=False: torch 2.13 defaults to the dynamo exporter, which needs
        # onnxscript; the TorchScript exporter handles this model.
        torch.onnx.export(
            module.eval(),
            dummy,
            str(path),
            input_names=list(input_names),
            output_names=list(output_names),
            dynamic_axes={k: dict(v) for k, v in axes.items()},
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )


def quantize_int8(src: Path, dst: Path) -> None:
    """Dynamic int8 quantisation of the MatMul weights (activations stay float).

    Unsigned weights: with signed ones, the u8 x s8 kernels of CPUs without VNNI saturate
    and flipped about 70% of the full model's argmaxes against fp32; unsigned kept 95%.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantizer logs one INFO line per tensor, and generic advice as a WARNING, straight
    # on the root logger. A filter there drops only its records: records of other loggers
    # reach the root's handlers by propagation and never pass the root logger's filters.
    root = logging.getLogger()
    quiet = _QuantizerChatter()
    root.addFilter(quiet)
    try:
        quantize_dynamic(
            str(src),
            str(dst),
            op_types_to_quantize=["MatMul"],
            per_channel=False,
            weight_type=QuantType.QUInt8,
        )
    finally:
        root.removeFilter(quiet)


class _QuantizerChatter(logging.Filter):
    """Drops onnxruntime.quantization's below-ERROR records logged on the root logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        chatter = "onnxruntime" in record.pathname and "quantization" in record.pathname
        return record.levelno >= logging.ERROR or not chatter


def convert_fp16(src: Path, dst: Path) -> None:
    """fp16 weights and compute with fp32 inputs and outputs kept, for GPU providers."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(src))
    onnx.save(convert_float_to_float16(model, keep_io_types=True), str(dst))


def _atomic(path: Path, write: object) -> None:
    """Write through a temp file in the same dir so a crash never leaves a half file."""
    fd, name = tempfile.mkstemp(prefix=path.stem, suffix=".onnx.tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)  # type: ignore[operator]
        tmp.chmod(0o644)  # mkstemp creates 0600; exports are shared read-only artefacts
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
