"""Features computed by the torch backend from raw audio (on the CPU here; on CUDA in
production) give the ids the CPU frontend's features give, through the recognizer too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.backends.parity import clips
from engine.backends.torch import TorchBackend
from engine.decoding.recognizer import Recognizer
from engine.errors import AudioError
from engine.features.fbank import Frontend
from engine.model.directory import ModelDir, load_model_dir
from engine.types import DecodeOptions
from tests.engine.gpu import needs_cuda
from tests.speech import Clip


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir: Path) -> ModelDir:
    return load_model_dir(tiny_model_dir)


@pytest.fixture(scope="module")
def audios(speech_clips: list[Clip]) -> list[np.ndarray]:
    return [c.audio for c in speech_clips]


@pytest.fixture(scope="module")
def cpu_features(model_dir: ModelDir) -> TorchBackend:
    return TorchBackend(model_dir, threads=2)


def options_for(n: int) -> list[DecodeOptions]:
    return [DecodeOptions(("auto", "en", "zh")[i % 3], i % 2 == 0) for i in range(n)]


@pytest.mark.parametrize("staged", [False, True])
def test_audio_in_gives_the_ids_of_cpu_features(
    model_dir: ModelDir, cpu_features: TorchBackend, audios: list[np.ndarray], staged: bool
) -> None:
    frontend = Frontend.from_model_dir(model_dir.path)
    feats = [frontend.features(a) for a in audios]
    on_device = TorchBackend(model_dir, threads=2, stage_inputs=staged, device_features=True)
    assert on_device.takes_audio and not cpu_features.takes_audio
    options = options_for(len(audios))
    want = cpu_features.run(feats, options)
    for got, expected in zip(on_device.run_audio(audios, options), want, strict=True):
        np.testing.assert_array_equal(got, expected)
    for i in (0, len(audios) - 1):
        alone = on_device.run_audio([audios[i]], [options[i]])[0]
        np.testing.assert_array_equal(alone, want[i])
    # The feature path stays open on such a backend (benchmarks time the model alone).
    np.testing.assert_array_equal(on_device.run(feats[:1], options[:1])[0], want[0])


def test_a_backend_without_device_features_refuses_audio(
    cpu_features: TorchBackend, audios: list[np.ndarray]
) -> None:
    with pytest.raises(RuntimeError, match="computes no features"):
        cpu_features.run_audio(audios[:1], options_for(1))


def test_the_recognizer_hands_checked_audio_to_such_a_backend(
    model_dir: ModelDir, cpu_features: TorchBackend, audios: list[np.ndarray]
) -> None:
    on_cpu = Recognizer(model_dir, cpu_features)
    on_device = Recognizer(model_dir, TorchBackend(model_dir, threads=2, device_features=True))
    assert on_device.features_on_device and not on_cpu.features_on_device
    utt = on_device.prepare(audios[0], DecodeOptions())
    assert utt.feats is None and utt.audio is audios[0]
    assert utt.frames == on_cpu.prepare(audios[0], DecodeOptions()).frames
    np.testing.assert_array_equal(on_device.features_of(utt), on_cpu.frontend.features(audios[0]))
    for bad in (np.zeros(100, np.float32), np.full(16000, np.nan, np.float32)):
        with pytest.raises(AudioError):
            on_device.prepare(bad, DecodeOptions())
    options = DecodeOptions("en")
    assert on_device.transcribe(audios, options, 3) == on_cpu.transcribe(audios, options, 3)


@needs_cuda
def test_features_on_cuda_give_the_ids_of_cpu_features(
    model_dir: ModelDir, cpu_features: TorchBackend
) -> None:
    audios = [audio for _, _, audio in clips([0.7, 2.0, 4.5, 9.0])]  # no espeak-ng there
    frontend = Frontend.from_model_dir(model_dir.path)
    want = cpu_features.run([frontend.features(a) for a in audios], options_for(len(audios)))
    on_gpu = TorchBackend(model_dir, device="cuda", precision="fp32")
    assert on_gpu.takes_audio
    got = on_gpu.run_audio(audios, options_for(len(audios)))
    agree = [np.mean(a == b) for a, b in zip(got, want, strict=True) if len(a) == len(b)]
    assert len(agree) == len(want) and min(agree) >= 0.98
