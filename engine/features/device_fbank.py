"""SenseVoice's frontend (Kaldi fbank, LFR, CMVN) as batched torch ops, for features on the GPU.

`DeviceFrontend` equals `Frontend.features` (kaldi-native-fbank, `apply_lfr`, CMVN) to float32
rounding: it mirrors kaldi-native-fbank's window, pre-emphasis, power spectrum and MelBanks
with the options `_fbank_options` sets (snip_edges, DC removal, power-of-two FFT, 20 Hz to
Nyquist, log floored at float32 epsilon). The mel projection is a float32 matmul: with TF32
matmuls enabled on the GPU (`torch.backends.cuda.matmul.allow_tf32`) it loses that agreement.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from engine.features.fbank import (
    INT16_SCALE,
    LOW_FREQ_HZ,
    PREEMPH_COEFF,
    FloatArray,
    Frontend,
    FrontendConfig,
)

_BLACKMAN_COEFF = 0.42
# knf floors mel energies at float32 epsilon before the log.
_LOG_FLOOR = float(np.finfo(np.float32).eps)


def _kaldi_window(window_type: str, length: int) -> FloatArray:
    """Kaldi's analysis window of `length` samples, computed in double as Kaldi does."""
    a = 2 * math.pi / (length - 1) if length > 1 else 0.0
    i = np.arange(length, dtype=np.float64)
    if window_type == "hamming":
        window = 0.54 - 0.46 * np.cos(a * i)
    elif window_type == "hanning":
        window = 0.5 - 0.5 * np.cos(a * i)
    elif window_type == "povey":
        window = (0.5 - 0.5 * np.cos(a * i)) ** 0.85
    elif window_type == "rectangular":
        window = np.ones(length)
    elif window_type == "blackman":
        window = _BLACKMAN_COEFF - 0.5 * np.cos(a * i) + (0.5 - _BLACKMAN_COEFF) * np.cos(2 * a * i)
    else:
        raise ValueError(f"unknown window type {window_type!r}")
    return window.astype(np.float32)


def _mel_scale(freq: FloatArray) -> FloatArray:
    """Kaldi's mel scale, in float32 like knf's `MelScale`."""
    mel: FloatArray = (np.float32(1127.0) * np.log1p(freq / np.float32(700.0))).astype(np.float32)
    return mel


def _kaldi_mel_banks(config: FrontendConfig, padded: int) -> FloatArray:
    """Kaldi's triangular mel filterbank as a [padded // 2 + 1, n_mels] matrix.

    knf's MelBanks covers FFT bins 0 .. padded/2 - 1; the Nyquist row is zero so the matrix
    applies to a whole rfft power spectrum.
    """
    num_fft_bins = padded // 2
    fft_bin_width = np.float32(config.sample_rate / padded)
    edges = _mel_scale(np.array([LOW_FREQ_HZ, 0.5 * config.sample_rate], dtype=np.float32))
    delta = (edges[1] - edges[0]) / np.float32(config.n_mels + 1)
    bins = np.arange(config.n_mels, dtype=np.float32)[None, :]
    left = edges[0] + bins * delta
    center = edges[0] + (bins + 1) * delta
    right = edges[0] + (bins + 2) * delta
    mel = _mel_scale(fft_bin_width * np.arange(num_fft_bins, dtype=np.float32))[:, None]
    rising = (mel - left) / (center - left)
    falling = (right - mel) / (right - center)
    weights = np.where((mel > left) & (mel < right), np.where(mel <= center, rising, falling), 0)
    out = np.zeros((num_fft_bins + 1, config.n_mels), dtype=np.float32)
    out[:num_fft_bins] = weights
    return out


class DeviceFrontend:
    """Batched float audio on a torch device to the features `Frontend.features` makes."""

    def __init__(self, frontend: Frontend, device: torch.device) -> None:
        cfg = frontend.config
        if cfg.dither > 0:
            raise ValueError(f"DeviceFrontend needs dither 0 (dither is random); got {cfg.dither}")
        self._frontend = frontend
        self._config = cfg
        self._device = torch.device(device)
        # Kaldi's round_to_power_of_two: the FFT size is the next power of two >= the window.
        self._fft_size = 1 << (cfg.window_samples - 1).bit_length()
        window = _kaldi_window(cfg.window, cfg.window_samples)
        self._window = torch.from_numpy(window).to(self._device)
        mel = _kaldi_mel_banks(cfg, self._fft_size)
        self._mel_banks = torch.from_numpy(mel).to(self._device)
        self._cmvn_shift = torch.from_numpy(frontend.cmvn.shift.copy()).to(self._device)
        self._cmvn_scale = torch.from_numpy(frontend.cmvn.scale.copy()).to(self._device)
        # LFR output frame i stacks fbank frames i*lfr_n + these offsets (clipped per item).
        offsets = torch.arange(cfg.lfr_m, dtype=torch.int64) - (cfg.lfr_m - 1) // 2
        self._lfr_offsets = offsets.to(self._device)

    @property
    def device(self) -> torch.device:
        """Where the constants live and where `__call__` wants its audio."""
        return self._device

    def lengths(self, num_samples: Sequence[int]) -> list[int]:
        """LFR frames per item, as `Frontend.num_frames` counts them."""
        return [self._frontend.num_frames(int(n)) for n in num_samples]

    def __call__(
        self, audio: torch.Tensor, num_samples: Sequence[int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Features for a zero-padded batch of float32 audio in [-1, 1].

        audio is [B, N] on `device`; item i is its first num_samples[i] samples (N >= all of
        them; samples past that are never read). Returns (feats [B, T_max, n_mels * lfr_m]
        float32, lengths [B] int32) on `device`; rows past an item's length are exactly zero.
        """
        fbank_frames = self._fbank_frames(audio, num_samples)
        lengths = [-(-f // self._config.lfr_n) for f in fbank_frames]
        # One small host-to-device copy carries what the gather and the mask need.
        counts = torch.tensor([fbank_frames, lengths], dtype=torch.int64, device=self._device)
        logmel = self._log_mel(audio, max(fbank_frames))
        feats = self._lfr(logmel, counts[0] - 1, max(lengths))
        feats = (feats + self._cmvn_shift) * self._cmvn_scale
        rows = torch.arange(feats.shape[1], device=self._device)
        valid = rows[None, :] < counts[1][:, None]
        feats = feats.masked_fill(~valid[:, :, None], 0.0)
        return feats, counts[1].to(torch.int32)

    def _fbank_frames(self, audio: torch.Tensor, num_samples: Sequence[int]) -> list[int]:
        """Kaldi (snip_edges) frame count per item, after checking the batch's shape."""
        if audio.ndim != 2 or audio.dtype != torch.float32:
            raise ValueError(f"audio must be [B, N] float32; got {audio.dtype} {list(audio.shape)}")
        batch, width = audio.shape
        if len(num_samples) != batch or batch == 0:
            raise ValueError(f"need one num_samples per item of {batch}; got {len(num_samples)}")
        window, shift = self._config.window_samples, self._config.shift_samples
        bad = [int(n) for n in num_samples if not window <= n <= width]
        if bad:
            raise ValueError(
                f"num_samples must be in [{window}, {width}] (one window .. the batch width); "
                f"got {bad}"
            )
        return [1 + (int(n) - window) // shift for n in num_samples]

    def _log_mel(self, audio: torch.Tensor, num_frames: int) -> torch.Tensor:
        """Log-mel fbank [B, num_frames, n_mels] of every item's first num_frames frames."""
        window, shift = self._config.window_samples, self._config.shift_samples
        used = (num_frames - 1) * shift + window
        # funasr scales to the int16 range; frame k covers samples [k*shift, k*shift+window).
        frames = (audio[:, :used] * float(INT16_SCALE)).unfold(1, window, shift)
        frames = frames - frames.mean(dim=-1, keepdim=True)
        # Kaldi's pre-emphasis: y[i] = x[i] - c*x[i-1], and y[0] = x[0] - c*x[0].
        previous = torch.cat([frames[..., :1], frames[..., :-1]], dim=-1)
        frames = (frames - PREEMPH_COEFF * previous) * self._window
        spectrum = torch.fft.rfft(frames, n=self._fft_size)
        power = torch.view_as_real(spectrum).square().sum(dim=-1)
        return torch.matmul(power, self._mel_banks).clamp_min(_LOG_FLOOR).log()

    def _lfr(self, logmel: torch.Tensor, last_frame: torch.Tensor, num_out: int) -> torch.Tensor:
        """funasr's LFR: [B, num_out, lfr_m * n_mels], clipping to each item's own frames."""
        cfg = self._config
        starts = torch.arange(num_out, device=self._device, dtype=torch.int64) * cfg.lfr_n
        index = (starts[:, None] + self._lfr_offsets[None, :]).clamp_min(0)
        # Each item's tail repeats its own last frame, not the batch's.
        index = torch.minimum(index[None, :, :], last_frame[:, None, None])
        batch, _, n_mels = logmel.shape
        flat = index.reshape(batch, num_out * cfg.lfr_m, 1).expand(-1, -1, n_mels)
        return logmel.gather(1, flat).reshape(batch, num_out, cfg.lfr_m * n_mels)
