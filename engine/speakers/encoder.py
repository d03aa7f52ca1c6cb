"""Who is speaking, as a point on the unit sphere: Resemblyzer's pretrained GE2E encoder.

The `resemblyzer` wheel (Apache-2.0) carries the weights (`pretrained.pt`, trained on real
speech). Only that file is read: the package's own code imports librosa and the original
webrtcvad, so it is installed without its dependencies (`make` does) and never imported.
The network is the package's (a 3-layer LSTM over 40 mel bands, a linear layer, ReLU, unit
length), and so is the way an utterance is embedded: 1.6 s windows, 1.3 a second, each
embedded, averaged and normalised; a last window less than three quarters full is dropped.
Audio is first raised (never lowered) to -30 dBFS, as the package's preprocessing does.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from engine.errors import BackendUnavailableError
from engine.speakers.features import HOP, SAMPLE_RATE, MelFrames

if TYPE_CHECKING:
    from engine.speakers.network import SpeakerNetwork

PACKAGE = "resemblyzer"
WEIGHTS = "pretrained.pt"
INSTALL_HINT = "pip install --no-deps resemblyzer==0.1.4"
EMBEDDING = 256
WINDOW_FRAMES = 160  # 1.6 s
WINDOWS_PER_S = 1.3
MIN_COVERAGE = 0.75
TARGET_DBFS = -30.0


class Speakers(Protocol):
    """What the engine asks of a speaker encoder, loaded or not yet."""

    def embed(self, utterances: Sequence[np.ndarray]) -> np.ndarray: ...


def weights_path() -> Path:
    """Where the installed `resemblyzer` package keeps its weights (it is not imported)."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = None if spec is None else spec.submodule_search_locations
    if not locations:
        raise BackendUnavailableError(
            f"the speaker encoder's weights come with the {PACKAGE} package, which is not "
            f"installed: {INSTALL_HINT}"
        )
    path = Path(next(iter(locations))) / WEIGHTS
    if not path.is_file():
        raise BackendUnavailableError(f"{path} is missing: reinstall with {INSTALL_HINT}")
    return path


def window_starts(samples: int) -> list[int]:
    """The first frame of each 1.6 s window that embeds `samples` of audio."""
    frames = int(np.ceil((samples + 1) / HOP))
    step = int(np.round(SAMPLE_RATE / WINDOWS_PER_S / HOP))
    starts = list(range(0, max(1, frames - WINDOW_FRAMES + step + 1), step))
    coverage = (samples - starts[-1] * HOP) / (WINDOW_FRAMES * HOP)
    if coverage < MIN_COVERAGE and len(starts) > 1:
        starts.pop()
    return starts


def louder(audio: np.ndarray) -> np.ndarray:
    """Raised to -30 dBFS if quieter (never lowered); silence stays silence."""
    rms = float(np.sqrt(np.mean(np.square(audio, dtype=np.float64)))) if audio.size else 0.0
    if rms == 0.0:
        return audio
    gain_db = TARGET_DBFS - 20 * np.log10(rms)
    return audio if gain_db <= 0 else (audio * 10 ** (gain_db / 20)).astype(np.float32)


@dataclass(frozen=True, slots=True)
class _Windows:
    mels: np.ndarray  # (windows, WINDOW_FRAMES, N_MELS)
    owner: np.ndarray  # which utterance each window embeds


class SpeakerEncoder:
    """Embeds utterances of 16 kHz float32 audio, many at a time, on one device."""

    def __init__(self, weights: Path | None = None, device: str = "cpu") -> None:
        path = weights or weights_path()
        # torch only when an encoder is made: a server that labels no speakers never pays
        # for importing it.
        import torch

        from engine.speakers.network import SpeakerNetwork

        self._device = torch.device(device)
        state = torch.load(path, map_location="cpu", weights_only=True)
        # GE2E's similarity scale and bias are for training only; every other key must fit.
        model = {k: v for k, v in state["model_state"].items() if not k.startswith("similarity")}
        self._net: SpeakerNetwork = SpeakerNetwork()
        self._net.load_state_dict(model)
        self._net.to(self._device).eval()
        self._mels = MelFrames()

    def embed(self, utterances: Sequence[np.ndarray]) -> np.ndarray:
        """(len(utterances), 256) unit vectors: similar voices have a high dot product."""
        import torch

        if not utterances:
            return np.zeros((0, EMBEDDING), np.float32)
        windows = self._windows(utterances)
        with torch.inference_mode():
            mels = torch.from_numpy(windows.mels).to(self._device)
            each = self._net(mels).cpu().numpy()
        sums = np.zeros((len(utterances), EMBEDDING), np.float64)
        np.add.at(sums, windows.owner, each)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        vectors: np.ndarray = (sums / np.maximum(norms, 1e-12)).astype(np.float32)
        return vectors

    def _windows(self, utterances: Sequence[np.ndarray]) -> _Windows:
        mels, owner = [], []
        for k, audio in enumerate(utterances):
            starts = window_starts(audio.size)
            needed = (starts[-1] + WINDOW_FRAMES) * HOP
            padded = np.pad(louder(np.asarray(audio, np.float32)), (0, max(0, needed - audio.size)))
            frames = self._mels(padded)
            mels += [frames[s : s + WINDOW_FRAMES] for s in starts]
            owner += [k] * len(starts)
        return _Windows(np.stack(mels).astype(np.float32), np.asarray(owner))


class LazySpeakerEncoder:
    """A `SpeakerEncoder` made at its first use (on the device's thread), so an engine
    whose streams never ask who spoke neither imports torch nor loads the weights."""

    def __init__(self, device: str = "cpu") -> None:
        self._device = device
        self._encoder: SpeakerEncoder | None = None

    @property
    def loaded(self) -> bool:
        return self._encoder is not None

    def embed(self, utterances: Sequence[np.ndarray]) -> np.ndarray:
        if self._encoder is None:
            self._encoder = SpeakerEncoder(device=self._device)
        return self._encoder.embed(utterances)
