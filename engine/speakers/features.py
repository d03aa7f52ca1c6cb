"""The speaker encoder's input: 40-band mel power spectra of 25 ms frames every 10 ms.

These are the features Resemblyzer's GE2E encoder was trained on (librosa's
`melspectrogram` with its defaults: a centred, zero-padded STFT with a periodic Hann
window, power 2, and Slaney's mel scale and band normalisation). They are computed here
with numpy so that the encoder needs neither librosa nor its dependencies; a test checks
them against librosa's (tests/engine/speakers/resemblyzer_reference.json).
"""

from __future__ import annotations

import numpy as np

SAMPLE_RATE = 16000
N_FFT = 400  # 25 ms
HOP = 160  # 10 ms
N_MELS = 40

# Slaney's mel scale: linear below 1 kHz, logarithmic above.
_F_SP = 200.0 / 3
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOG_STEP = np.log(6.4) / 27.0


def hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    hz = np.asarray(hz, np.float64)
    log_part = _MIN_LOG_MEL + np.log(np.maximum(hz, _MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOG_STEP
    mel: np.ndarray = np.where(hz >= _MIN_LOG_HZ, log_part, hz / _F_SP)
    return mel


def mel_to_hz(mel: np.ndarray | float) -> np.ndarray:
    mel = np.asarray(mel, np.float64)
    log_part = _MIN_LOG_HZ * np.exp(_LOG_STEP * (mel - _MIN_LOG_MEL))
    hz: np.ndarray = np.where(mel >= _MIN_LOG_MEL, log_part, _F_SP * mel)
    return hz


def mel_filters() -> np.ndarray:
    """(N_MELS, N_FFT // 2 + 1) triangular filters, each of unit area in Hz (Slaney)."""
    fft_hz = np.linspace(0.0, SAMPLE_RATE / 2, N_FFT // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(SAMPLE_RATE / 2), N_MELS + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - fft_hz[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return weights.astype(np.float32)


class MelFrames:
    """Mel power spectra of 16 kHz audio: (frames, N_MELS), a frame per 10 ms, centred."""

    def __init__(self) -> None:
        # The periodic Hann window (librosa's, for an STFT).
        self._window = np.hanning(N_FFT + 1)[:-1].astype(np.float32)
        self._filters = mel_filters()

    def __call__(self, audio: np.ndarray) -> np.ndarray:
        padded = np.pad(np.asarray(audio, np.float32), N_FFT // 2)
        count = 1 + (padded.size - N_FFT) // HOP
        if count < 1:
            return np.zeros((0, N_MELS), np.float32)
        frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP][:count]
        power = np.abs(np.fft.rfft(frames * self._window, axis=1)) ** 2
        mels: np.ndarray = (power.astype(np.float32) @ self._filters.T).astype(np.float32)
        return mels
