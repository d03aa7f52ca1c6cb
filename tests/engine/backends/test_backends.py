"""Backends on the tiny model and real espeak-ng speech: batch invariance and parity."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from engine.backends.base import Backend
from engine.backends.onnx import OnnxBackend
from engine.backends.registry import BackendOptions, create_backend, ensure_onnx
from engine.backends.torch import TorchBackend
from engine.features.fbank import Frontend
from engine.model.directory import ModelDir, load_model_dir
from engine.model.prompts import PROMPT_FRAMES
from engine.types import DecodeOptions
from tests.speech import Clip

AUTO = DecodeOptions()


@pytest.fixture(scope="module", params=["tiny", "full"])
def model_dir(request: pytest.FixtureRequest) -> ModelDir:
    """The tiny model always; the full-size one when SENSESTREAM_FULL_MODEL names it."""
    fixture = "tiny_model_dir" if request.param == "tiny" else "full_model_dir"
    return load_model_dir(request.getfixturevalue(fixture))


@pytest.fixture(scope="module")
def feats(model_dir: ModelDir, speech_clips: list[Clip]) -> list[np.ndarray]:
    frontend = Frontend.from_model_dir(model_dir.path)
    return [frontend.features(c.audio) for c in speech_clips]


@pytest.fixture(scope="module")
def torch_fp32(model_dir: ModelDir) -> TorchBackend:
    return TorchBackend(model_dir, threads=2)


@pytest.fixture(scope="module")
def onnx_fp32(model_dir: ModelDir) -> OnnxBackend:
    return OnnxBackend(model_dir, precision="fp32", onnx_path=ensure_onnx(model_dir, "fp32"))


@pytest.fixture(scope="module")
def onnx_int8(model_dir: ModelDir) -> OnnxBackend:
    return OnnxBackend(model_dir, precision="int8", onnx_path=ensure_onnx(model_dir, "int8"))


def solo(backend: Backend, feats: list[np.ndarray], options: DecodeOptions = AUTO) -> list:
    return [backend.run([f], [options])[0] for f in feats]


def batches_to_check(n: int, seed: int = 7) -> list[list[int]]:
    """All clips at once, both orders, pairs of short+long, and random subsets."""
    rng = random.Random(seed)
    everything = list(range(n))
    shapes = [everything, everything[::-1], [0, n - 1], [n - 1, 0, n - 2]]
    shapes += [rng.sample(everything, k) for k in (2, 3, 5, 6) for _ in range(2)]
    return shapes


@pytest.mark.parametrize("backend_name", ["torch_fp32", "onnx_fp32"])
def test_same_ids_alone_or_in_any_batch(
    backend_name: str, feats: list[np.ndarray], request: pytest.FixtureRequest
) -> None:
    backend: Backend = request.getfixturevalue(backend_name)
    alone = solo(backend, feats)
    for idx, ids in enumerate(alone):
        assert ids.dtype == np.int32
        assert len(ids) == feats[idx].shape[0] + PROMPT_FRAMES
    for order in batches_to_check(len(feats)):
        batched = backend.run([feats[i] for i in order], [AUTO] * len(order))
        for pos, i in enumerate(order):
            np.testing.assert_array_equal(batched[pos], alone[i], err_msg=f"clip {i} in {order}")


def test_extra_padding_changes_nothing(torch_fp32: TorchBackend, feats: list[np.ndarray]) -> None:
    # A long silent companion forces every clip to be padded far past its end.
    filler = np.zeros((max(f.shape[0] for f in feats) + 97, feats[0].shape[1]), np.float32)
    for f in feats:
        alone = torch_fp32.run([f], [AUTO])[0]
        padded = torch_fp32.run([f, filler], [AUTO, AUTO])[0]
        np.testing.assert_array_equal(padded, alone)


def test_torch_and_onnx_fp32_agree_exactly(
    torch_fp32: TorchBackend, onnx_fp32: OnnxBackend, feats: list[np.ndarray]
) -> None:
    for a, b in zip(solo(torch_fp32, feats), solo(onnx_fp32, feats), strict=True):
        np.testing.assert_array_equal(a, b)
    together_t = torch_fp32.run(feats, [AUTO] * len(feats))
    together_o = onnx_fp32.run(feats, [AUTO] * len(feats))
    for a, b in zip(together_t, together_o, strict=True):
        np.testing.assert_array_equal(a, b)


def test_int8_mostly_agrees_with_fp32(
    onnx_fp32: OnnxBackend, onnx_int8: OnnxBackend, feats: list[np.ndarray]
) -> None:
    ref = np.concatenate(solo(onnx_fp32, feats))
    got = np.concatenate(solo(onnx_int8, feats))
    agreement = float((ref == got).mean())
    print(f"int8 frame-argmax agreement with fp32: {agreement:.3f}")
    # Random weights give nearly flat logits, so some argmaxes flip under int8: about 3%
    # on the tiny model and 5% on the full one with unsigned weights (70% with signed).
    assert agreement > 0.9


def test_each_item_keeps_its_own_prompts(
    torch_fp32: TorchBackend, onnx_fp32: OnnxBackend, feats: list[np.ndarray]
) -> None:
    prompts = [
        DecodeOptions(lang, itn)
        for lang, itn in itertools.product(("auto", "zh", "en", "yue", "ja", "ko"), (True, False))
    ]
    clip = feats[1]
    for backend in (torch_fp32, onnx_fp32):
        alone = [backend.run([clip], [p])[0] for p in prompts]
        mixed = backend.run([clip] * len(prompts), prompts)
        for a, b in zip(alone, mixed, strict=True):
            np.testing.assert_array_equal(a, b)
        # The prompts reach the model: language and ITN change the output.
        distinct = {a.tobytes() for a in alone}
        assert len(distinct) > 1


def test_create_backend_defaults_to_onnx_int8_on_cpu(model_dir: ModelDir) -> None:
    backend = create_backend(model_dir, BackendOptions())
    assert backend.name == "onnx-int8-cpu"
    torch_backend = create_backend(model_dir, BackendOptions(backend="torch"))
    assert torch_backend.name == "torch-fp32-cpu"


def test_auto_is_onnx_on_the_cpu_and_torch_on_cuda() -> None:
    # torch is the GPU path measured end to end (device features, CUDA graphs).
    assert BackendOptions().backend == "onnx"
    assert BackendOptions(device="cuda").backend == "torch"
    assert BackendOptions(device="cuda:0,cuda:1").backend == "torch"
    assert BackendOptions("onnx", device="cuda").backend == "onnx"
    with pytest.raises(ValueError, match="backend must be one of"):
        BackendOptions("tensorflow")
