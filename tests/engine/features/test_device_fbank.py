"""engine.features.device_fbank against the kaldi-native-fbank Frontend, batched and padded."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.backends.parity import clips
from engine.features.device_fbank import DeviceFrontend
from engine.features.fbank import WINDOW_TYPES, Frontend, FrontendConfig
from tests.engine.gpu import needs_cuda
from tests.speech import Clip

#: Largest |device - knf| feature difference allowed. Both sides compute in float32 and differ
#: mostly in their FFTs' rounding, which matters only in mel bins far below the frame's energy;
#: the worst seen over 13 sets of the (noise-dithered) espeak clips was 3.2e-4, and knf itself
#: is up to 1.7e-4 from a float64 computation of the same pipeline.
FEATURE_ATOL = 1e-3

EDGE_LENGTHS = (400, 401, 559, 560, 561, 1000, 1200, 1360, 16000, 16001)


@pytest.fixture(scope="module")
def frontend(tiny_model_dir: Path) -> Frontend:
    return Frontend.from_model_dir(tiny_model_dir)


@pytest.fixture(scope="module")
def device_frontend(frontend: Frontend) -> DeviceFrontend:
    return DeviceFrontend(frontend, torch.device("cpu"))


def noise(num_samples: int) -> np.ndarray:
    return np.random.default_rng(num_samples).uniform(-0.5, 0.5, num_samples).astype(np.float32)


def pad(audios: Sequence[np.ndarray], width: int | None = None) -> torch.Tensor:
    """Zero-padded [B, width] batch (width defaults to the longest item)."""
    batch = np.zeros((len(audios), width or max(a.size for a in audios)), dtype=np.float32)
    for i, audio in enumerate(audios):
        batch[i, : audio.size] = audio
    return torch.from_numpy(batch)


def run_batch(
    dev: DeviceFrontend, audios: Sequence[np.ndarray], width: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Features and lengths of one call, checked for shape, dtype, device and zero padding."""
    feats, lengths = dev(pad(audios, width).to(dev.device), [a.size for a in audios])
    assert feats.dtype == torch.float32 and lengths.dtype == torch.int32
    assert feats.device == dev.device and lengths.device == dev.device
    expected = dev.lengths([a.size for a in audios])
    assert lengths.tolist() == expected
    assert tuple(feats.shape) == (len(audios), max(expected), 560)
    out = feats.cpu().numpy()
    for i, length in enumerate(expected):
        assert np.all(out[i, length:] == 0.0)
    return out, lengths.cpu().numpy()


def assert_matches(
    frontend: Frontend, feats: np.ndarray, lengths: np.ndarray, audios: Sequence[np.ndarray]
) -> float:
    """Assert each item equals `Frontend.features` within FEATURE_ATOL; return the worst diff."""
    worst = 0.0
    for i, audio in enumerate(audios):
        ref = frontend.features(audio)
        assert int(lengths[i]) == ref.shape[0] == frontend.num_frames(audio.size)
        np.testing.assert_allclose(feats[i, : ref.shape[0]], ref, rtol=0, atol=FEATURE_ATOL)
        worst = max(worst, float(np.abs(feats[i, : ref.shape[0]] - ref).max()))
    return worst


def test_speech_batch_matches_frontend(
    frontend: Frontend, device_frontend: DeviceFrontend, speech_clips: list[Clip]
) -> None:
    audios = [clip.audio for clip in speech_clips]
    assert len({a.size for a in audios}) == len(audios)  # padding differs per item
    feats, lengths = run_batch(device_frontend, audios)
    assert assert_matches(frontend, feats, lengths, audios) <= FEATURE_ATOL


def test_edge_lengths_singly_and_batched(
    frontend: Frontend, device_frontend: DeviceFrontend
) -> None:
    audios = [noise(n) for n in EDGE_LENGTHS]
    for audio in audios:
        assert_matches(frontend, *run_batch(device_frontend, [audio]), [audio])
    assert_matches(frontend, *run_batch(device_frontend, audios), audios)


def test_silence_hits_the_same_log_floor(
    frontend: Frontend, device_frontend: DeviceFrontend
) -> None:
    # Zero energy is floored at float32 epsilon before the log, as knf does.
    audios = [np.zeros(4000, dtype=np.float32), noise(1000)]
    assert_matches(frontend, *run_batch(device_frontend, audios), audios)


@pytest.mark.parametrize("window", sorted(WINDOW_TYPES))
def test_every_window_type_matches_knf(
    frontend: Frontend, speech_clips: list[Clip], window: str
) -> None:
    windowed = Frontend(FrontendConfig(window=window), frontend.cmvn)
    audios = [speech_clips[1].audio, noise(16001)]
    feats, lengths = run_batch(DeviceFrontend(windowed, torch.device("cpu")), audios)
    assert_matches(windowed, feats, lengths, audios)


def test_batch_items_are_independent_of_each_other_and_of_padding(
    device_frontend: DeviceFrontend, speech_clips: list[Clip]
) -> None:
    audios = [speech_clips[0].audio, noise(561), speech_clips[2].audio]
    batched, _ = run_batch(device_frontend, audios)
    wide, _ = run_batch(device_frontend, audios, width=max(a.size for a in audios) + 5000)
    np.testing.assert_array_equal(wide, batched)
    # Bit-identical on CPU torch today; rounding-level slack in case FFT or GEMM kernels
    # are chosen by batch size.
    for i, audio in enumerate(audios):
        alone, (length,) = run_batch(device_frontend, [audio])
        np.testing.assert_allclose(batched[i, :length], alone[0], rtol=0, atol=1e-6)


def test_samples_past_num_samples_are_ignored(device_frontend: DeviceFrontend) -> None:
    audio = noise(16000)
    clean = pad([audio], 17000)
    dirty = clean.clone()
    dirty[0, 16000:] = 0.9
    a, _ = device_frontend(clean, [16000])
    b, _ = device_frontend(dirty, [16000])
    assert torch.equal(a, b)


def test_lengths_match_num_frames(frontend: Frontend, device_frontend: DeviceFrontend) -> None:
    sizes = [0, 399, *EDGE_LENGTHS, 160000]
    assert device_frontend.lengths(sizes) == [frontend.num_frames(n) for n in sizes]


def test_bad_batches_raise(device_frontend: DeviceFrontend) -> None:
    audio = torch.zeros(2, 1000)
    for num_samples in ([1000], [1000, 1000, 1000], [1000, 399], [1001, 1000], [1000, -1]):
        with pytest.raises(ValueError, match="num_samples"):
            device_frontend(audio, num_samples)
    with pytest.raises(ValueError, match="num_samples"):
        device_frontend(torch.zeros(0, 1000), [])
    with pytest.raises(ValueError, match="float32"):
        device_frontend(torch.zeros(1000), [1000])
    with pytest.raises(ValueError, match="float32"):
        device_frontend(audio.double(), [1000, 1000])


def test_dither_is_refused(frontend: Frontend) -> None:
    dithered = Frontend(FrontendConfig(dither=1.0), frontend.cmvn)
    with pytest.raises(ValueError, match="dither"):
        DeviceFrontend(dithered, torch.device("cpu"))


@needs_cuda
def test_cuda_matches_frontend(frontend: Frontend) -> None:
    # Synthetic voice and noise: the GPU host has no espeak-ng.
    dev = DeviceFrontend(frontend, torch.device("cuda"))
    audios = [audio for _, _, audio in clips([0.7, 2.0, 4.5, 9.0])]
    assert_matches(frontend, *run_batch(dev, audios), audios)
