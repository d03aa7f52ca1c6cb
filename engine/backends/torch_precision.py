"""What funasr's SenseVoice encoder needs to run its activations in fp16 or bf16."""

from __future__ import annotations

import torch
from torch import nn

from engine.model.network import CtcArgmax


class Fp32Positions(nn.Module):
    """Adds the encoder's sinusoidal position code computed in fp32, then cast.

    funasr computes it in the activation dtype: in fp16 the sine arguments of a 15 s
    utterance (up to ~250 rad) are rounded to 1/8 rad, which visibly changes outputs.
    """

    def __init__(self, original: nn.Module) -> None:
        super().__init__()
        self.original = original

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(1, x.size(1) + 1, device=x.device)[None, :]
        code: torch.Tensor = self.original.encode(  # type: ignore[operator]
            positions, x.size(2), torch.float32
        )
        return x + code.to(x.dtype)


def keep_positions_fp32(model: CtcArgmax) -> bool:
    """Swap the encoder's position module for `Fp32Positions`; False when it has none."""
    embed = getattr(model.encoder, "embed", None)
    if embed is None or not callable(getattr(embed, "encode", None)):
        return False
    model.encoder.embed = Fp32Positions(embed)
    return True


class MasksInActivationDtype(nn.Module):
    """Runs funasr's SenseVoice encoder with its padding masks in the activation dtype.

    funasr builds the masks in fp32. fp16 or bf16 activations times an fp32 mask are fp32,
    so the FSMN memory block's conv1d gets fp32 input against half weights and refuses
    it. The layers are funasr's own; only the mask and the output lengths are built here,
    the lengths from `ilens` because a bf16 sum of ones is inexact past 256 frames.
    """

    def __init__(self, original: nn.Module) -> None:
        super().__init__()
        self.original = original

    def forward(self, xs: torch.Tensor, ilens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.original
        frames = torch.arange(xs.size(1), device=ilens.device)
        masks = (frames[None, :] < ilens[:, None]).to(xs.dtype)[:, None, :]
        xs = enc.embed(xs * enc.output_size() ** 0.5)  # type: ignore[operator]
        for layer in (*enc.encoders0, *enc.encoders):  # type: ignore[misc]
            xs, masks = layer(xs, masks)[:2]
        xs = enc.after_norm(xs)  # type: ignore[operator]
        for layer in enc.tp_encoders:  # type: ignore[union-attr]
            xs, masks = layer(xs, masks)[:2]
        return enc.tp_norm(xs), ilens.to(torch.int32)  # type: ignore[operator]


def for_reduced_precision(model: CtcArgmax) -> None:
    """Adapt the model, still in fp32, before it is cast to fp16 or bf16."""
    keep_positions_fp32(model)
    model.encoder = MasksInActivationDtype(model.encoder)
