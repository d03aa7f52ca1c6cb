"""engine.backends.cuda_graphs on the CPU: bucket padding gives the same ids, and without
CUDA the graph path falls back to eager running; the capture itself runs on a GPU host."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.backends.cuda_graphs import (
    BucketedModel,
    StaticInputs,
    capture_buckets,
    capture_or_eager,
    eager_buckets,
)
from engine.backends.graph_buckets import Bucket, BucketPlan, plan_buckets
from engine.backends.parity import clips
from engine.backends.registry import BackendOptions, create_backend
from engine.backends.torch import TorchBackend
from engine.features.fbank import Frontend
from engine.model.directory import ModelDir, load_model_dir
from engine.model.network import FEATURE_DIM, CtcArgmax, load_ctc_argmax
from engine.model.prompts import PROMPT_FRAMES, prompt_arrays
from engine.types import DecodeOptions
from tests.engine.gpu import needs_cuda
from tests.speech import Clip

CPU = torch.device("cpu")
PLAN = BucketPlan((1, 2, 4, 8), (16, 32, 64, 96, 128, 192, 256, 320))


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir: Path) -> ModelDir:
    return load_model_dir(tiny_model_dir)


@pytest.fixture(scope="module")
def model(model_dir: ModelDir) -> CtcArgmax:
    return load_ctc_argmax(model_dir).eval()


@pytest.fixture(scope="module")
def feats(model_dir: ModelDir, speech_clips: list[Clip]) -> list[np.ndarray]:
    frontend = Frontend.from_model_dir(model_dir.path)
    return [frontend.features(c.audio) for c in speech_clips]


def options_for(n: int) -> list[DecodeOptions]:
    return [DecodeOptions(("auto", "en", "zh")[i % 3], i % 2 == 0) for i in range(n)]


def tensors(
    feats: list[np.ndarray],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    frames = max(f.shape[0] for f in feats)
    speech = torch.zeros(len(feats), frames, FEATURE_DIM)
    for i, f in enumerate(feats):
        speech[i, : f.shape[0]] = torch.from_numpy(f)
    lengths = torch.tensor([f.shape[0] for f in feats], dtype=torch.int32)
    language, textnorm = (torch.from_numpy(a) for a in prompt_arrays(options_for(len(feats))))
    return speech, lengths, language, textnorm


def per_item(ids: torch.Tensor, lens: torch.Tensor) -> list[np.ndarray]:
    return [ids[i, : int(lens[i])].numpy().copy() for i in range(ids.shape[0])]


def test_bucket_padding_gives_the_same_ids(model: CtcArgmax, feats: list[np.ndarray]) -> None:
    assert max(f.shape[0] for f in feats) <= PLAN.lengths[-1], "clips must fit the plan"
    bucketed = eager_buckets(model, PLAN, FEATURE_DIM, torch.float32, CPU)
    groups = [[0], [1, 2, 3], feats and list(range(len(feats)))[:5], [len(feats) - 1, 0]]
    with torch.inference_mode():
        for group in groups:
            chosen = [feats[i] for i in group]
            args = tensors(chosen)
            direct = per_item(*model(*args))
            ids, lens = bucketed(*args)
            assert ids.shape == (len(group), args[0].shape[1] + PROMPT_FRAMES)
            for item, (want, got) in enumerate(zip(direct, per_item(ids, lens), strict=True)):
                np.testing.assert_array_equal(got, want, err_msg=f"clips {group}, item {item}")
    assert bucketed.stats.replayed == len(groups) and bucketed.stats.eager == 0


def test_a_smaller_batch_after_a_larger_sees_no_stale_rows(
    model: CtcArgmax, feats: list[np.ndarray]
) -> None:
    bucketed = eager_buckets(model, PLAN, FEATURE_DIM, torch.float32, CPU)
    longest = max(range(len(feats)), key=lambda i: feats[i].shape[0])
    shortest = min(range(len(feats)), key=lambda i: feats[i].shape[0])
    chosen = [feats[shortest], feats[longest]]
    bucket = PLAN.choose(2, feats[longest].shape[0])
    assert bucket is not None
    if bucket.frames == feats[longest].shape[0]:
        chosen[1] = chosen[1][:-1]  # leave padding in time to be cleared
    # The bucket's every cell dirty, then a batch shorter than it in both ways.
    noisy = [np.full((bucket.frames, FEATURE_DIM), np.nan, np.float32)] * bucket.batch
    with torch.inference_mode():
        bucketed(*tensors(noisy))
        args = tensors(chosen[:1])
        want = per_item(*model(*args))
        got = per_item(*bucketed(*args))
        args = tensors(chosen)
        want += per_item(*model(*args))
        got += per_item(*bucketed(*args))
    assert bucketed.stats.replayed == 3
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(b, a)


def test_batches_outside_the_plan_run_eagerly(model: CtcArgmax, feats: list[np.ndarray]) -> None:
    small = BucketPlan((1,), (16,))
    bucketed = eager_buckets(model, small, FEATURE_DIM, torch.float32, CPU)
    long_clip = max(feats, key=lambda f: f.shape[0])
    with torch.inference_mode():
        args = tensors([long_clip])
        assert per_item(*bucketed(*args))[0].tolist() == per_item(*model(*args))[0].tolist()
        bucketed.enabled = False
        bucketed(*tensors([long_clip[:10]]))
    assert bucketed.stats.eager == 2 and bucketed.stats.replayed == 0


def test_static_inputs_zero_everything_past_the_batch() -> None:
    static = StaticInputs(Bucket(3, 8), 4, torch.float32, CPU)
    static.speech.fill_(7.0)
    static.lengths.fill_(9)
    speech = torch.ones(2, 5, 4)
    static.load(
        speech,
        torch.tensor([5, 3], dtype=torch.int32),
        torch.tensor([4, 3]),
        torch.tensor([14, 15]),
    )
    assert torch.equal(static.speech[:2, :5], speech)
    assert not static.speech[:2, 5:].any() and not static.speech[2:].any()
    assert static.lengths.tolist() == [5, 3, 0]
    assert static.language.tolist() == [4, 3, 0] and static.textnorm.tolist() == [14, 15, 0]


def test_capture_needs_cuda_and_falls_back_to_eager_without_it(
    model: CtcArgmax, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(RuntimeError, match="CUDA"):
        capture_buckets(model, PLAN, FEATURE_DIM, torch.float32, CPU)
    with caplog.at_level(logging.INFO, logger="sensestream.engine"):
        assert capture_or_eager(model, PLAN, FEATURE_DIM, torch.float32, CPU) is None
    assert "every batch runs eagerly" in caplog.text


def test_a_torch_backend_asked_for_graphs_on_the_cpu_runs_eagerly(
    model_dir: ModelDir, feats: list[np.ndarray]
) -> None:
    plain = TorchBackend(model_dir, threads=2)
    graphed = TorchBackend(model_dir, threads=2, graphs=plan_buckets(320))
    assert graphed.graph_plan is None and graphed.graph_buckets == ()
    options = options_for(len(feats))
    for a, b in zip(plain.run(feats, options), graphed.run(feats, options), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("staged", [False, True])
def test_the_backend_through_buckets_gives_the_ids_it_gives_without(
    model_dir: ModelDir, feats: list[np.ndarray], staged: bool
) -> None:
    plain = TorchBackend(model_dir, threads=2)
    bucketed = TorchBackend(
        model_dir, threads=2, stage_inputs=staged, graphs=PLAN, bucketing=eager_buckets
    )
    assert bucketed.graph_plan == PLAN and len(bucketed.graph_buckets) == len(PLAN.buckets)
    for size in (1, 3, 5):
        chosen, options = feats[:size], options_for(size)
        for a, b in zip(plain.run(chosen, options), bucketed.run(chosen, options), strict=True):
            np.testing.assert_array_equal(b, a)
    graphs = bucketed.graphs
    assert isinstance(graphs, BucketedModel) and graphs.stats.replayed == 3
    with bucketed.eager():
        bucketed.run(feats[:1], options_for(1))
    assert graphs.stats.eager == 1 and graphs.enabled


def test_graphs_and_device_features_are_only_on_by_default_on_cuda(model_dir: ModelDir) -> None:
    backend = create_backend(model_dir, BackendOptions("torch", "fp32", "cpu", threads=1))
    assert isinstance(backend, TorchBackend)
    assert backend.graph_plan is None and not backend.takes_audio
    with pytest.raises(ValueError, match="needs --backend torch --device cuda"):
        BackendOptions("torch", "fp32", "cpu", cuda_graphs="on")
    for name in ("cuda_graphs", "device_features"):
        with pytest.raises(ValueError, match="needs --backend torch"):
            BackendOptions("onnx", "fp16", "cuda", **{name: "on"})
        with pytest.raises(ValueError, match="one of"):
            BackendOptions("torch", **{name: "yes"})
    on_cpu = BackendOptions("torch", "fp32", "cpu", threads=1, device_features="on")
    assert isinstance(backend := create_backend(model_dir, on_cpu), TorchBackend)
    assert backend.takes_audio


@needs_cuda
def test_captured_graphs_give_the_eager_ids_on_cuda(model_dir: ModelDir) -> None:
    frontend = Frontend.from_model_dir(model_dir.path)  # synthetic clips: no espeak-ng there
    feats = [frontend.features(audio) for _, _, audio in clips([0.7, 2.0, 4.5, 9.0])]
    eager = TorchBackend(model_dir, device="cuda", precision="fp32")
    graphed = TorchBackend(model_dir, device="cuda", precision="fp32", graphs=PLAN)
    assert graphed.graph_plan == PLAN
    # cuBLAS may pick other kernels for the padded shape, so rounding may differ: on the
    # random weights' flat logits that can flip a rare argmax, never a length.
    for size in (1, 2, 3, 4):
        chosen, options = feats[:size], options_for(size)
        for a, b in zip(eager.run(chosen, options), graphed.run(chosen, options), strict=True):
            assert a.shape == b.shape and np.mean(a == b) >= 0.99
    graphs = graphed.graphs
    assert graphs is not None and graphs.stats.replayed == 4
