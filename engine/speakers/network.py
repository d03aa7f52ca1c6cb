"""The GE2E speaker encoder's network, as Resemblyzer defines it (imports torch)."""

from __future__ import annotations

import torch
from torch import nn

from engine.speakers.features import N_MELS

HIDDEN = 256
EMBEDDING = 256
LAYERS = 3


class SpeakerNetwork(nn.Module):
    """A 3-layer LSTM over mel frames; its last state, through a linear layer and ReLU,
    scaled to unit length."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(N_MELS, HIDDEN, LAYERS, batch_first=True)
        self.linear = nn.Linear(HIDDEN, EMBEDDING)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        _, (hidden, _) = self.lstm(mels)
        raw = torch.relu(self.linear(hidden[-1]))
        unit: torch.Tensor = raw / torch.norm(raw, dim=1, keepdim=True).clamp_min(1e-12)
        return unit
