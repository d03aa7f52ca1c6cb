"""TorchBackend: funasr's SenseVoiceSmall encoder in PyTorch on CPU or CUDA."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
import torch

from engine.backends.host_staging import HostStaging, pack_padded
from engine.backends.torch_precision import for_reduced_precision
from engine.errors import BackendOutOfMemoryError, BackendUnavailableError
from engine.features.fbank import pad_batch
from engine.model.directory import ModelDir
from engine.model.network import load_ctc_argmax
from engine.model.prompts import prompt_arrays
from engine.types import DecodeOptions

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


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
    """

    def __init__(
        self,
        model_dir: ModelDir,
        *,
        device: str = "cpu",
        precision: str = "fp32",
        threads: int | None = None,
        stage_inputs: bool | None = None,
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
        cuda = self._device.type == "cuda"
        staged = cuda if stage_inputs is None else stage_inputs
        self._inputs = HostStaging(pin=cuda) if staged else None
        self._outputs = HostStaging(pin=cuda) if staged else None

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

    def run(
        self, feats: Sequence[np.ndarray], options: Sequence[DecodeOptions]
    ) -> list[np.ndarray]:
        """Decode one padded batch; see `engine.backends.base.Backend.run`."""
        language, textnorm = prompt_arrays(options)
        try:
            with torch.inference_mode(), self._on_device():
                if self._inputs is None:
                    ids, lens = self._run_direct(feats, language, textnorm)
                else:
                    ids, lens = self._run_staged(feats, language, textnorm)
        except torch.OutOfMemoryError as exc:
            if self._device.type == "cuda":
                # The failed batch's blocks stay cached and fragmented; the scheduler retries
                # with halves, which should find the memory whole.
                torch.cuda.empty_cache()
            raise BackendOutOfMemoryError(f"{self._label}: {exc}") from exc
        # Copies: the staged arrays are views of a buffer the next batch overwrites.
        return [ids[i, : int(lens[i])].copy() for i in range(len(feats))]

    def _run_direct(
        self, feats: Sequence[np.ndarray], language: np.ndarray, textnorm: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        padded, lengths = pad_batch(feats)
        inputs = [torch.from_numpy(a).to(self._device) for a in (lengths, language, textnorm)]
        speech = torch.from_numpy(padded).to(self._device).to(self._dtype)
        ids, out_lens = self._model(speech, *inputs)
        return ids.cpu().numpy(), out_lens.cpu().numpy()

    def _run_staged(
        self, feats: Sequence[np.ndarray], language: np.ndarray, textnorm: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        if self._inputs is None or self._outputs is None:
            raise RuntimeError("staging buffers were not set up")
        batch, frames, dim = len(feats), max(f.shape[0] for f in feats), feats[0].shape[1]
        i32 = np.dtype(np.int32)
        vector = ((batch,), i32)
        host = self._inputs.reserve(
            [((batch, frames, dim), np.dtype(np.float32)), vector, vector, vector]
        )
        pack_padded(host[0], feats)
        host[1].numpy()[:] = [f.shape[0] for f in feats]
        host[2].numpy()[:] = language
        host[3].numpy()[:] = textnorm
        speech, lengths, lang, norm = self._inputs.upload(self._device)
        # fp32 goes over the bus and is cast on the device, where it is nearly free.
        ids, out_lens = self._model(speech.to(self._dtype), lengths, lang, norm)
        back = self._outputs.reserve([(tuple(ids.shape), i32), (tuple(out_lens.shape), i32)])
        pinned = self._outputs.pinned
        back[0].copy_(ids, non_blocking=pinned)
        back[1].copy_(out_lens, non_blocking=pinned)
        self._synchronize()
        return back[0].numpy(), back[1].numpy()

    def _synchronize(self) -> None:
        # Non-blocking copies into pinned memory are only complete once the stream is.
        if self._device.type == "cuda":
            torch.cuda.current_stream(self._device).synchronize()

    def _on_device(self) -> contextlib.AbstractContextManager[object]:
        """Make this backend's GPU current, so streams and allocations land on it."""
        if self._device.type != "cuda":
            return contextlib.nullcontext()
        return torch.cuda.device(self._device)
