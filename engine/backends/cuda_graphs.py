"""CUDA graphs of the encoder, captured per planned bucket and replayed for small batches.

On the H200 a lone 10 s utterance took 42 ms, flat from batch 1 to 64: the encoder is
about fifty layers of small kernels launched one by one from Python. A captured graph
launches them all at once. Each bucket owns static input tensors that a batch is copied
into, padded as `engine.backends.graph_buckets` describes; the graphs share one memory pool
(they never run at the same time: one thread drives a device).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from engine.backends.graph_buckets import Bucket, BucketPlan
from engine.model.prompts import PROMPT_FRAMES

log = logging.getLogger("sensestream.engine")

#: (speech [B, T, D], lengths [B], language [B], textnorm [B]) -> (ids [B, T+4], lengths [B]).
Model = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]
]
#: Runs the model over one bucket's static inputs and returns its (static) outputs.
BucketRun = Callable[[], tuple[torch.Tensor, torch.Tensor]]
#: Warm-up runs before each capture: the first call's lazy set-up must not be captured.
WARMUP_RUNS = 2


class StaticInputs:
    """One bucket's input tensors, which a batch is copied into before its graph replays."""

    def __init__(
        self, bucket: Bucket, feature_dim: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        self.bucket = bucket
        self.speech = torch.zeros(
            bucket.batch, bucket.frames, feature_dim, dtype=dtype, device=device
        )
        # Empty rows have length 0 (only their prompt frames are valid) and prompt row 0.
        self.lengths = torch.zeros(bucket.batch, dtype=torch.int32, device=device)
        self.language = torch.zeros(bucket.batch, dtype=torch.int32, device=device)
        self.textnorm = torch.zeros(bucket.batch, dtype=torch.int32, device=device)

    def args(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.speech, self.lengths, self.language, self.textnorm

    def load(
        self,
        speech: torch.Tensor,
        lengths: torch.Tensor,
        language: torch.Tensor,
        textnorm: torch.Tensor,
    ) -> None:
        """Copy a batch in; everything past it is zero, as the eager path pads it.

        Zeros, not whatever the last batch left: the FSMN memory multiplies padded frames
        by a zero mask, which would turn a stale NaN into NaN, not zero.
        """
        batch, frames = speech.shape[0], speech.shape[1]
        self.speech[:batch, :frames].copy_(speech)
        self.speech[:batch, frames:].zero_()
        self.speech[batch:].zero_()
        vectors = ((self.lengths, lengths), (self.language, language), (self.textnorm, textnorm))
        for static, given in vectors:
            static[:batch].copy_(given)
            static[batch:].zero_()


@dataclass
class GraphStats:
    """How batches ran; plain counters owned by the device's thread."""

    replayed: int = 0
    eager: int = 0


class BucketedModel:
    """Runs a batch in the smallest bucket that holds it, or eagerly at its own shape."""

    def __init__(
        self,
        model: Model,
        plan: BucketPlan,
        runs: Mapping[Bucket, tuple[StaticInputs, BucketRun]],
    ) -> None:
        self._model = model
        self.plan = plan
        self._runs = dict(runs)
        self.stats = GraphStats()
        self.enabled = True  # False: every batch runs eagerly (see TorchBackend.eager)

    @property
    def buckets(self) -> tuple[Bucket, ...]:
        return tuple(sorted(self._runs))

    def __call__(
        self,
        speech: torch.Tensor,
        lengths: torch.Tensor,
        language: torch.Tensor,
        textnorm: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's (ids, lengths) for this batch, sliced back to its own shape.

        The outputs may be the bucket's static tensors: read them before the next call.
        """
        batch, frames = speech.shape[0], speech.shape[1]
        bucket = self.plan.choose(batch, frames)
        entry = None if bucket is None or not self.enabled else self._runs.get(bucket)
        if entry is None:
            self.stats.eager += 1
            return self._model(speech, lengths, language, textnorm)
        inputs, run = entry
        inputs.load(speech, lengths, language, textnorm)
        ids, out_lens = run()
        self.stats.replayed += 1
        return ids[:batch, : frames + PROMPT_FRAMES], out_lens[:batch]


def eager_buckets(
    model: Model, plan: BucketPlan, feature_dim: int, dtype: torch.dtype, device: torch.device
) -> BucketedModel:
    """Buckets that run the model eagerly on their static inputs: the same padding as a
    graph's, without capture (on the CPU, it is how the padding is tested)."""
    runs: dict[Bucket, tuple[StaticInputs, BucketRun]] = {}
    for bucket in plan.buckets:
        inputs = StaticInputs(bucket, feature_dim, dtype, device)
        runs[bucket] = (inputs, _eager_run(model, inputs))
    return BucketedModel(model, plan, runs)


def _eager_run(model: Model, inputs: StaticInputs) -> BucketRun:
    return lambda: model(*inputs.args())


def capture_buckets(
    model: Model, plan: BucketPlan, feature_dim: int, dtype: torch.dtype, device: torch.device
) -> BucketedModel:
    """Capture a graph of `model` for every bucket on the CUDA `device`, largest first.

    Call under `torch.inference_mode()` with `device` current. Raises RuntimeError where
    CUDA is absent or capture fails; `capture_or_eager` turns that into eager running.
    """
    if device.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError(f"CUDA graphs need a CUDA device; this backend runs on {device}")
    pool = torch.cuda.graph_pool_handle()
    side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]  # untyped in torch
    runs: dict[Bucket, tuple[StaticInputs, BucketRun]] = {}
    for bucket in plan.buckets:
        inputs = StaticInputs(bucket, feature_dim, dtype, device)
        # torch's rule for capture: warm up on a side stream first, so that lazy
        # initialisation (cuBLAS handles, kernel selection) is not recorded.
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                model(*inputs.args())
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            outputs = model(*inputs.args())
        runs[bucket] = (inputs, _replay(graph, outputs))
    torch.cuda.synchronize(device)
    return BucketedModel(model, plan, runs)


def _replay(graph: torch.cuda.CUDAGraph, outputs: tuple[torch.Tensor, torch.Tensor]) -> BucketRun:
    def run() -> tuple[torch.Tensor, torch.Tensor]:
        graph.replay()
        return outputs

    return run


def capture_or_eager(
    model: Model, plan: BucketPlan, feature_dim: int, dtype: torch.dtype, device: torch.device
) -> BucketedModel | None:
    """The captured buckets, or None (eager for every batch) when capture is not possible
    here; the reason is logged once, as a warning only on a CUDA device."""
    try:
        return capture_buckets(model, plan, feature_dim, dtype, device)
    except RuntimeError as exc:
        level = logging.WARNING if device.type == "cuda" else logging.INFO
        log.log(level, "CUDA graphs off, every batch runs eagerly: %s", exc)
        if device.type == "cuda":
            torch.cuda.empty_cache()  # whatever a failed capture left in its pool
        return None
