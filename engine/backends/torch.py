"""TorchBackend: funasr's SenseVoiceSmall encoder in PyTorch on CPU or CUDA."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from engine.backends.base import ScoredFrames
from engine.backends.cuda_graphs import BucketedModel, Model, capture_or_eager
from engine.backends.graph_buckets import Bucket, BucketPlan
from engine.backends.host_staging import HostStaging, pack_padded, torch_to_numpy
from engine.backends.torch_precision import for_reduced_precision
from engine.errors import BackendOutOfMemoryError, BackendUnavailableError
from engine.features.device_fbank import DeviceFrontend
from engine.features.fbank import Frontend, pad_batch
from engine.model.directory import ModelDir
from engine.model.network import FEATURE_DIM, CtcTopK, load_ctc_argmax
from engine.model.prompts import prompt_arrays
from engine.types import DecodeOptions

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
#: Captures (or stands in for) the graphs of a plan; `capture_or_eager` but in tests.
Bucketing = Callable[[Model, BucketPlan, int, torch.dtype, torch.device], BucketedModel | None]


def check_torch_device(device: str, precision: str) -> torch.device:
    """Validate the device/precision pair before any weights are loaded."""
    if precision not in DTYPES:
        raise BackendUnavailableError(
            f"torch backend supports precision fp32, fp16 or bf16; got {precision!r}"
        )
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise BackendUnavailableError(f"unknown torch device {device!r}: {exc}") from exc
    if dev.type not in ("cpu", "cuda"):
        raise BackendUnavailableError(f"torch backend runs on cpu or cuda, not {device!r}")
    if dev.type == "cpu" and precision != "fp32":
        raise BackendUnavailableError(f"{precision} needs --device cuda; use fp32 on the CPU")
    if dev.type == "cuda":
        _check_cuda(dev, precision)
    return dev


def _check_cuda(dev: torch.device, precision: str) -> None:
    if not torch.cuda.is_available():
        raise BackendUnavailableError("--device cuda was asked for but CUDA is not available")
    count = torch.cuda.device_count()
    if dev.index is not None and dev.index >= count:
        raise BackendUnavailableError(f"{dev} does not exist: this host has {count} GPU(s)")
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        raise BackendUnavailableError(f"{dev} has no bf16 support; use fp16")


class TorchBackend:
    """Runs batches under `torch.inference_mode` and returns argmax ids per frame.

    On CUDA the inputs are packed into one reused pinned buffer and copied over in one
    asynchronous transfer; the argmax is taken on the device, so only int32 ids come back,
    through a second pinned buffer. `stage_inputs` forces that path on (or off) anywhere.
    `device_features` (default: on CUDA) takes raw audio (`run_audio`) and computes the
    features on the device. `graphs` plans CUDA graphs for small batches; where they
    cannot be captured (no CUDA) every batch runs eagerly.
    """

    def __init__(
        self,
        model_dir: ModelDir,
        *,
        device: str = "cpu",
        precision: str = "fp32",
        threads: int | None = None,
        stage_inputs: bool | None = None,
        device_features: bool | None = None,
        graphs: BucketPlan | None = None,
        bucketing: Bucketing = capture_or_eager,
    ) -> None:
        self._device = check_torch_device(device, precision)
        self._dtype = DTYPES[precision]
        self._label = f"torch-{precision}-{self._device.type}"
        if threads is not None and self._device.type == "cpu":
            torch.set_num_threads(threads)
        model = load_ctc_argmax(model_dir)
        if self._dtype != torch.float32:
            for_reduced_precision(model)
        self._model = model.to(device=self._device, dtype=self._dtype)
        self._scored = CtcTopK(self._model)
        cuda = self._device.type == "cuda"
        staged = cuda if stage_inputs is None else stage_inputs
        self._inputs = HostStaging(pin=cuda) if staged else None
        self._outputs = HostStaging(pin=cuda) if staged else None
        on_device = cuda if device_features is None else device_features
        self._frontend = (
            DeviceFrontend(Frontend.from_model_dir(model_dir.path), self._device)
            if on_device
            else None
        )
        self._graphs: BucketedModel | None = None
        if graphs is not None:
            with torch.inference_mode(), self._on_device():
                self._graphs = bucketing(
                    self._model, graphs, FEATURE_DIM, self._dtype, self._device
                )

    @property
    def name(self) -> str:
        return self._label

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def staging(self) -> HostStaging | None:
        """The input staging buffer (None when inputs go over unstaged)."""
        return self._inputs

    @property
    def takes_audio(self) -> bool:
        """True when `run_audio` computes the features on the device."""
        return self._frontend is not None

    @property
    def graph_buckets(self) -> tuple[Bucket, ...]:
        """The buckets small batches replay graphs of (empty: every batch runs eagerly)."""
        return () if self._graphs is None else self._graphs.buckets

    @property
    def graphs(self) -> BucketedModel | None:
        return self._graphs

    @property
    def graph_plan(self) -> BucketPlan | None:
        return None if self._graphs is None else self._graphs.plan

    @contextlib.contextmanager
    def eager(self) -> Iterator[None]:
        """Run every batch eagerly meanwhile (memory calibration measures eager peaks)."""
        if self._graphs is None:
            yield
            return
        self._graphs.enabled = False
        try:
            yield
        finally:
            self._graphs.enabled = True

    def run(
        self, feats: Sequence[np.ndarray], options: Sequence[DecodeOptions]
    ) -> list[np.ndarray]:
        """Decode one padded batch; see `engine.backends.base.Backend.run`."""
        ids, lens = self._outputs_of(feats, options, None, scored=False)
        # Copies: the staged arrays are views of a buffer the next batch overwrites.
        return [ids[i, : int(lens[i])].copy() for i in range(len(feats))]

    def run_audio(
        self, audios: Sequence[np.ndarray], options: Sequence[DecodeOptions]
    ) -> list[np.ndarray]:
        """Like `run`, from float32 audio whose features are computed on the device.

        Each clip must be long enough for one frame (the recognizer checks it first).
        """
        ids, lens = self._outputs_of(audios, options, self._audio_frontend(), scored=False)
        return [ids[i, : int(lens[i])].copy() for i in range(len(audios))]

    def run_scored(
        self, inputs: Sequence[np.ndarray], options: Sequence[DecodeOptions], *, audio: bool
    ) -> list[ScoredFrames]:
        """`run` (or `run_audio`) with each frame's best candidates, for biased decoding
        and confidence; always eager (the graphs hold the argmax model only)."""
        frontend = self._audio_frontend() if audio else None
        ids, lens, top_ids, top_lp = self._outputs_of(inputs, options, frontend, scored=True)
        return [
            ScoredFrames(
                ids[i, : int(lens[i])].copy(),
                top_ids[i, : int(lens[i])].copy(),
                top_lp[i, : int(lens[i])].copy(),
            )
            for i in range(len(inputs))
        ]

    def scoring_ready(self) -> bool:
        """Always: the scored model shares the loaded weights."""
        return True

    def _audio_frontend(self) -> DeviceFrontend:
        if self._frontend is None:
            raise RuntimeError(f"{self._label} computes no features; call run()")
        return self._frontend

    def _outputs_of(
        self,
        arrays: Sequence[np.ndarray],
        options: Sequence[DecodeOptions],
        frontend: DeviceFrontend | None,
        *,
        scored: bool,
    ) -> list[np.ndarray]:
        """Features (or audio, through `frontend`) through the model: uploaded, run, and
        its outputs brought back (views of a buffer the next batch overwrites)."""
        language, textnorm = prompt_arrays(options)
        try:
            with torch.inference_mode(), self._on_device():
                speech, lengths, lang, norm = self._upload(arrays, language, textnorm)
                if frontend is not None:
                    speech, lengths = frontend(speech, [int(a.shape[0]) for a in arrays])
                forward: Callable[..., tuple[torch.Tensor, ...]] = (
                    self._scored if scored else (self._graphs or self._model)
                )
                # fp32 goes over the bus and is cast on the device, where it is nearly free.
                return self._download(forward(speech.to(self._dtype), lengths, lang, norm))
        except torch.OutOfMemoryError as exc:
            if self._device.type == "cuda":
                # The failed batch's blocks stay cached and fragmented; the scheduler retries
                # with halves, which should find the memory whole.
                torch.cuda.empty_cache()
            raise BackendOutOfMemoryError(f"{self._label}: {exc}") from exc

    def _upload(
        self, arrays: Sequence[np.ndarray], language: np.ndarray, textnorm: np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """float32 arrays ([T_i] audio or [T_i, D] features) zero-padded, their lengths and
        the prompts on the device: in one asynchronous copy when staged."""
        lengths = np.array([a.shape[0] for a in arrays], dtype=np.int32)
        if self._inputs is None:
            padded = pad_batch(arrays)[0] if arrays[0].ndim == 2 else _pad_audio(arrays)
            device = self._device
            return (
                torch.from_numpy(padded).to(device),
                torch.from_numpy(lengths).to(device),
                torch.from_numpy(language).to(device),
                torch.from_numpy(textnorm).to(device),
            )
        shape = (len(arrays), int(lengths.max()), *arrays[0].shape[1:])
        vector = ((len(arrays),), np.dtype(np.int32))
        host = self._inputs.reserve([(shape, np.dtype(np.float32)), vector, vector, vector])
        pack_padded(host[0], arrays)
        for slot, values in zip(host[1:], (lengths, language, textnorm), strict=True):
            slot.numpy()[:] = values
        speech, lens, lang, norm = self._inputs.upload(self._device)
        return speech, lens, lang, norm

    def _download(self, outputs: Sequence[torch.Tensor]) -> list[np.ndarray]:
        """The model's outputs on the host (through the pinned buffer when staged)."""
        if self._outputs is None:
            return [t.cpu().numpy() for t in outputs]
        specs = [(tuple(t.shape), np.dtype(torch_to_numpy(t.dtype))) for t in outputs]
        back = self._outputs.reserve(specs)
        pinned = self._outputs.pinned
        for host, device in zip(back, outputs, strict=True):
            host.copy_(device, non_blocking=pinned)
        # Non-blocking copies into pinned memory are only complete once the stream is.
        if self._device.type == "cuda":
            torch.cuda.current_stream(self._device).synchronize()
        return [host.numpy() for host in back]

    def _on_device(self) -> contextlib.AbstractContextManager[object]:
        """Make this backend's GPU current, so streams and allocations land on it."""
        if self._device.type != "cuda":
            return contextlib.nullcontext()
        return torch.cuda.device(self._device)


def _pad_audio(audios: Sequence[np.ndarray]) -> np.ndarray:
    out = np.zeros((len(audios), max(a.shape[0] for a in audios)), dtype=np.float32)
    for i, audio in enumerate(audios):
        out[i, : audio.shape[0]] = audio
    return out
