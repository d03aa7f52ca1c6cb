"""The GPU code paths: staging buffers, I/O binding, fp32 positions, provider options.

What can run on the CPU runs here on the CPU (the same code with pinning and the device
swapped out); the CUDA tests skip cleanly without a GPU. The clips are synthetic so that a
GPU host without espeak-ng runs them too.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.backends.host_staging import ALIGN, HostStaging, pack_padded, plan
from engine.backends.onnx import OnnxBackend, cuda_options, select_providers, tensorrt_options
from engine.backends.parity import clips
from engine.backends.registry import BackendOptions, create_backend, ensure_onnx
from engine.backends.torch import TorchBackend
from engine.backends.torch_precision import Fp32Positions, keep_positions_fp32
from engine.errors import BackendUnavailableError
from engine.features.fbank import Frontend
from engine.model.directory import ModelDir, load_model_dir
from engine.model.network import load_ctc_argmax
from engine.types import DecodeOptions
from tests.engine.gpu import needs_cuda, needs_ort_cuda, needs_two_gpus

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir: Path) -> ModelDir:
    return load_model_dir(tiny_model_dir)


@pytest.fixture(scope="module")
def feats(model_dir: ModelDir) -> list[np.ndarray]:
    frontend = Frontend.from_model_dir(model_dir.path)
    return [frontend.features(audio) for _, _, audio in clips([0.7, 2.0, 4.5, 9.0])]


def options_for(n: int) -> list[DecodeOptions]:
    return [DecodeOptions(("auto", "en", "zh")[i % 3], i % 2 == 0) for i in range(n)]


# ---- host staging -------------------------------------------------------------------


def test_slots_are_aligned_and_do_not_overlap() -> None:
    slots, used = plan([((3, 5, 7), F32), ((3,), I32), ((1,), I32)])
    assert [s.offset % ALIGN for s in slots] == [0, 0, 0]
    for a, b in itertools.pairwise(slots):
        assert a.offset + a.nbytes <= b.offset
    assert used >= slots[-1].offset + slots[-1].nbytes


def test_staging_round_trips_and_grows_only_when_needed() -> None:
    staging = HostStaging(pin=False)
    rng = np.random.default_rng(0)
    feats = [rng.standard_normal((n, 4)).astype(np.float32) for n in (3, 5, 2)]
    host = staging.reserve([((3, 5, 4), F32), ((3,), I32)])
    host[0].numpy()[:] = 7.0  # stale data from an earlier batch must not leak through
    pack_padded(host[0], feats)
    host[1].numpy()[:] = [3, 5, 2]
    speech, lengths = staging.upload(torch.device("cpu"))
    for i, f in enumerate(feats):
        np.testing.assert_array_equal(speech[i, : f.shape[0]].numpy(), f)
        assert not speech[i, f.shape[0] :].any()
    assert lengths.tolist() == [3, 5, 2] and lengths.dtype == torch.int32
    assert staging.reallocations == 1
    first = staging.capacity
    staging.reserve([((2, 2, 4), F32)])
    assert staging.reallocations == 1 and staging.capacity == first  # reused
    staging.reserve([((64, 500, 560), F32)])
    assert staging.reallocations == 2 and staging.capacity >= 64 * 500 * 560 * 4


def test_torch_staged_path_equals_the_direct_one(model_dir: ModelDir, feats: list) -> None:
    direct = TorchBackend(model_dir, threads=2, stage_inputs=False)
    staged = TorchBackend(model_dir, threads=2, stage_inputs=True)
    assert direct.staging is None and staged.staging is not None
    assert not staged.staging.pinned  # nothing to pin for on the CPU
    options = options_for(len(feats))
    for order in (list(range(len(feats))), [2, 0], [len(feats) - 1]):
        chosen = [feats[i] for i in order]
        opts = [options[i] for i in order]
        for a, b in zip(direct.run(chosen, opts), staged.run(chosen, opts), strict=True):
            np.testing.assert_array_equal(a, b)
    assert staged.staging.reallocations == 1  # the first, largest batch sized it


# ---- fp32 positions ------------------------------------------------------------------


def test_positions_in_fp32_survive_half_precision(model_dir: ModelDir) -> None:
    model = load_ctc_argmax(model_dir)
    original = model.encoder.embed
    x = torch.zeros(1, 254, 64, dtype=torch.bfloat16)  # a 15 s utterance plus prompts
    positions = torch.arange(1, 255)[None, :]
    exact = original.encode(positions, 64, torch.float32)
    naive = original(x).float()
    fixed = Fp32Positions(original)(x).float()
    assert (naive - exact).abs().max() > 0.1  # funasr's own code, in bf16
    assert (fixed - exact).abs().max() < 0.01  # only the final cast's rounding is left
    assert keep_positions_fp32(model)
    assert isinstance(model.encoder.embed, Fp32Positions)


# ---- onnxruntime ---------------------------------------------------------------------


def test_io_binding_gives_the_same_ids(model_dir: ModelDir, feats: list) -> None:
    path = ensure_onnx(model_dir, "fp32")
    plain = OnnxBackend(model_dir, precision="fp32", onnx_path=path)
    bound = OnnxBackend(model_dir, precision="fp32", onnx_path=path, io_binding=True)
    assert not plain.uses_io_binding and bound.uses_io_binding
    options = options_for(len(feats))
    for a, b in zip(plain.run(feats, options), bound.run(feats, options), strict=True):
        np.testing.assert_array_equal(a, b)


def test_io_binding_of_the_scored_graph_gives_the_same_ids(
    model_dir: ModelDir, feats: list
) -> None:
    # A scored graph has more outputs: each is bound, and the ids are read from the first.
    plain = OnnxBackend(model_dir, precision="fp32", onnx_path=ensure_onnx(model_dir, "fp32"))
    scored_path = ensure_onnx(model_dir, "fp32", scored=True)
    bound = OnnxBackend(
        model_dir, precision="fp32", onnx_path=scored_path, io_binding=True, scored=True
    )
    assert bound.uses_io_binding
    options = options_for(len(feats))
    for a, b in zip(plain.run(feats, options), bound.run(feats, options), strict=True):
        np.testing.assert_array_equal(a, b)


def test_cuda_provider_options() -> None:
    options = cuda_options(1)
    assert options["device_id"] == 1
    assert options["cudnn_conv_algo_search"] == "HEURISTIC"
    assert options["arena_extend_strategy"] == "kSameAsRequested"
    trt = tensorrt_options(0, True, Path("/tmp/trt"))
    assert trt["trt_fp16_enable"] and trt["trt_engine_cache_path"] == "/tmp/trt"
    assert "speech:64x" in trt["trt_profile_max_shapes"]
    assert "trt_engine_cache_enable" not in tensorrt_options(0, False, None)


def test_cuda_needs_the_gpu_onnxruntime_and_a_gpu_precision() -> None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        with pytest.raises(BackendUnavailableError, match="fp16 or fp32"):
            select_providers("cuda:0", "int8")
        providers = select_providers("cuda:1", "fp16")
        assert providers[0] == ("CUDAExecutionProvider", cuda_options(1))
    else:
        with pytest.raises(BackendUnavailableError, match="onnxruntime-gpu"):
            select_providers("cuda:1", "fp16")


def test_one_backend_takes_one_device(model_dir: ModelDir) -> None:
    with pytest.raises(BackendUnavailableError, match="one device"):
        create_backend(model_dir, BackendOptions(device="cuda:0,cuda:1"))
    with pytest.raises(ValueError):
        BackendOptions(device="tpu")


# ---- on a real GPU -------------------------------------------------------------------


def agreement(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return float((np.concatenate(a) == np.concatenate(b)).mean())


@needs_cuda
@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp32"])
def test_torch_on_cuda_matches_the_cpu(model_dir: ModelDir, feats: list, precision: str) -> None:
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("no bf16 on this GPU")
    cpu = TorchBackend(model_dir)
    gpu = TorchBackend(model_dir, device="cuda", precision=precision)
    assert gpu.name == f"torch-{precision}-cuda"
    assert gpu.staging is not None and gpu.staging.pinned
    options = options_for(len(feats))
    ref = cpu.run(feats, options)
    got = gpu.run(feats, options)
    assert all(g.dtype == np.int32 and len(g) == len(r) for g, r in zip(got, ref, strict=True))
    # Random weights make nearly flat logits, so half precision flips a few argmaxes.
    assert agreement(ref, got) > (0.999 if precision == "fp32" else 0.9)
    for _ in range(3):
        gpu.run(feats, options)
    assert gpu.staging.reallocations == 1  # the pinned buffer is reused, not re-pinned


@needs_cuda
def test_cuda_batches_do_not_depend_on_their_companions(model_dir: ModelDir, feats: list) -> None:
    gpu = TorchBackend(model_dir, device="cuda", precision="fp32")
    alone = [gpu.run([f], [DecodeOptions()])[0] for f in feats]
    together = gpu.run(feats, [DecodeOptions()] * len(feats))
    assert agreement(alone, together) > 0.999


@needs_two_gpus
def test_second_gpu_gives_the_same_ids(model_dir: ModelDir, feats: list) -> None:
    first = TorchBackend(model_dir, device="cuda:0", precision="fp16")
    second = TorchBackend(model_dir, device="cuda:1", precision="fp16")
    options = options_for(len(feats))
    for a, b in zip(first.run(feats, options), second.run(feats, options), strict=True):
        np.testing.assert_array_equal(a, b)


@needs_ort_cuda
def test_onnx_fp16_on_cuda_binds_io_and_matches_the_cpu(model_dir: ModelDir, feats: list) -> None:
    cpu = OnnxBackend(model_dir, precision="fp32", onnx_path=ensure_onnx(model_dir, "fp32"))
    gpu = OnnxBackend(
        model_dir, device="cuda:0", precision="fp16", onnx_path=ensure_onnx(model_dir, "fp16")
    )
    assert gpu.uses_io_binding and gpu.name == "onnx-fp16-cuda"
    options = options_for(len(feats))
    assert agreement(cpu.run(feats, options), gpu.run(feats, options)) > 0.9
