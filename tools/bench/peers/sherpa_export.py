"""The same weights in sherpa-onnx 1.12.40's SenseVoice layout, so both engines run one model.

sherpa-onnx computes fbank, LFR and CMVN itself (CMVN from the model's metadata) and wants
the raw CTC logits: inputs `x` (N, T, 560) float32 and int32 `x_length`, `language`,
`text_norm` in that order, one output `logits` (N, T + 4, vocab). Its int8 model is the
same dynamic quantisation as ours (unsigned MatMul weights, one scale per tensor), so the
comparison is of equal compute. A wrong input dtype does not fail there: it returns empty
text, which is why `tests/bench/peers` decodes through sherpa and checks the words.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from engine.backends.onnx_export import quantize_int8, trace_to_onnx
from engine.features.fbank import Frontend
from engine.model.directory import ModelDir
from engine.model.network import CtcArgmax, load_ctc_argmax
from engine.model.prompts import LANGUAGE_INDEX, WITH_ITN_INDEX, WITHOUT_ITN_INDEX
from engine.model.tokenizer import Tokenizer

#: sherpa's reference exporter's opset, inputs and dynamic axes.
OPSET = 13
INPUTS = ("x", "x_length", "language", "text_norm")
AXES = {name: {0: "N"} for name in INPUTS[1:]} | {"x": {0: "N", 1: "T"}, "logits": {0: "N", 1: "T"}}


@dataclass(frozen=True, slots=True)
class SherpaModel:
    """What `OfflineRecognizer.from_sense_voice` takes."""

    model: Path
    tokens: Path


class SherpaLogits(nn.Module):
    """Our encoder and prompts, returning the logits rather than their argmax."""

    def __init__(self, core: CtcArgmax) -> None:
        super().__init__()
        self.core = core

    def forward(
        self,
        x: torch.Tensor,
        x_length: torch.Tensor,
        language: torch.Tensor,
        text_norm: torch.Tensor,
    ) -> torch.Tensor:
        encoder_out, _ = self.core.encode(x, x_length, language, text_norm)
        logits: torch.Tensor = self.core.ctc_lo(encoder_out)
        return logits


def export_sherpa(model_dir: ModelDir, out: Path, *, int8: bool) -> SherpaModel:
    """Write `model.onnx` (or `model.int8.onnx`) and `tokens.txt` into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer.from_file(model_dir.tokenizer_path)
    meta = metadata(Frontend.from_model_dir(model_dir.path), tokenizer.vocab_size)
    fp32 = out / "model.onnx"
    if not fp32.exists():
        module = SherpaLogits(load_ctc_argmax(model_dir))
        tmp = out / "model.tmp.onnx"
        trace_to_onnx(
            module, tmp, input_names=INPUTS, output_names=["logits"], axes=AXES, opset=OPSET
        )
        _with_metadata(tmp, meta).replace(fp32)
    model = fp32
    if int8:
        model = out / "model.int8.onnx"
        if not model.exists():
            quantize_int8(fp32, out / "model.int8.tmp.onnx")
            _with_metadata(out / "model.int8.tmp.onnx", meta).replace(model)
    tokens = out / "tokens.txt"
    pieces = (f"{tokenizer.piece(i)} {i}\n" for i in range(tokenizer.vocab_size))
    tokens.write_text("".join(pieces), encoding="utf-8")
    return SherpaModel(model, tokens)


def metadata(frontend: Frontend, vocab_size: int) -> dict[str, str]:
    """Every key sherpa-onnx 1.12.40 reads (all required but `comment` and `blank_id`)."""
    values: dict[str, object] = {
        "model_type": "sense_voice_ctc",
        "comment": "SenseStream export of SenseVoiceSmall weights",
        "vocab_size": vocab_size,
        "blank_id": 0,
        "lfr_window_size": frontend.config.lfr_m,
        "lfr_window_shift": frontend.config.lfr_n,
        "normalize_samples": 0,  # sherpa scales samples by 32768, as funasr does
        "with_itn": WITH_ITN_INDEX,
        "without_itn": WITHOUT_ITN_INDEX,
        "neg_mean": ",".join(str(float(v)) for v in frontend.cmvn.shift),
        "inv_stddev": ",".join(str(float(v)) for v in frontend.cmvn.scale),
    }
    values |= {f"lang_{name}": index for name, index in LANGUAGE_INDEX.items()}
    return {key: str(value) for key, value in values.items()}


def _with_metadata(path: Path, meta: dict[str, str]) -> Path:
    """`path`, its metadata replaced by `meta` (the quantizer keeps no metadata of its own)."""
    import onnx

    model = onnx.load(str(path))
    del model.metadata_props[:]
    for key, value in meta.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, str(path))
    return path
