"""The reduced-precision adaptations of the encoder, checked in bf16 on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.backends.torch_precision import MasksInActivationDtype, for_reduced_precision
from engine.model.directory import load_model_dir
from engine.model.network import CtcArgmax, load_ctc_argmax


def _batch() -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    # 400 frames is past bf16's last exact integer (256), which a summed mask would lose.
    speech = torch.randn(2, 400, 560)
    lengths = torch.tensor([400, 300], dtype=torch.int32)
    prompts = torch.tensor([0, 0], dtype=torch.int32), torch.tensor([15, 15], dtype=torch.int32)
    return speech, (lengths, *prompts)


def _model(tiny_model_dir: Path) -> CtcArgmax:
    return load_ctc_argmax(load_model_dir(tiny_model_dir))


def test_funasr_encoder_refuses_half_activations_unadapted(tiny_model_dir: Path) -> None:
    speech, args = _batch()
    model = _model(tiny_model_dir).to(torch.bfloat16)
    with torch.inference_mode(), pytest.raises(RuntimeError):
        model(speech.to(torch.bfloat16), *args)


def test_adapted_encoder_runs_in_bf16_and_agrees_with_fp32(tiny_model_dir: Path) -> None:
    speech, args = _batch()
    reference = _model(tiny_model_dir)
    adapted = _model(tiny_model_dir)
    for_reduced_precision(adapted)
    assert isinstance(adapted.encoder, MasksInActivationDtype)
    adapted = adapted.to(torch.bfloat16)
    with torch.inference_mode():
        want_ids, want_lens = reference(speech, *args)
        got_ids, got_lens = adapted(speech.to(torch.bfloat16), *args)
    assert got_lens.tolist() == want_lens.tolist() == [404, 304]
    assert got_ids.dtype == torch.int32
    for row, length in enumerate(want_lens.tolist()):
        agree = (got_ids[row, :length] == want_ids[row, :length]).float().mean().item()
        assert agree > 0.9, f"item {row}: {agree:.3f} of frames agree"


def test_adapted_encoder_is_exact_in_fp32(tiny_model_dir: Path) -> None:
    speech, args = _batch()
    reference = _model(tiny_model_dir)
    adapted = _model(tiny_model_dir)
    for_reduced_precision(adapted)
    with torch.inference_mode():
        want = reference(speech, *args)
        got = adapted(speech, *args)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
