"""TorchBackend: funasr's SenseVoiceSmall encoder in PyTorch on CPU or CUDA."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from engine.errors import BackendOutOfMemoryError, BackendUnavailableError
from engine.frontend import pad_batch
from engine.model_dir import ModelDir
from engine.prompts import prompt_arrays
from engine.torch_model import load_ctc_argmax
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
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise BackendUnavailableError("--device cuda was asked for but CUDA is not available")
    if dev.type not in ("cpu", "cuda"):
        raise BackendUnavailableError(f"torch backend runs on cpu or cuda, not {device!r}")
    if dev.type == "cpu" and precision != "fp32":
        raise BackendUnavailableError(f"{precision} needs --device cuda; use fp32 on the CPU")
    return dev


class TorchBackend:
    """Runs batches under `torch.inference_mode` and returns argmax ids per frame."""

    def __init__(
        self,
        model_dir: ModelDir,
        *,
        device: str = "cpu",
        precision: str = "fp32",
        threads: int | None = None,
    ) -> None:
        self._device = check_torch_device(device, precision)
        self._dtype = DTYPES[precision]
        self._label = f"torch-{precision}-{self._device.type}"
        if threads is not None and self._device.type == "cpu":
            torch.set_num_threads(threads)
        model = load_ctc_argmax(model_dir)
        self._model = model.to(device=self._device, dtype=self._dtype)

    @property
    def name(self) -> str:
        return self._label

    @property
    def device(self) -> torch.device:
        return self._device

    def run(
        self, feats: Sequence[np.ndarray], options: Sequence[DecodeOptions]
    ) -> list[np.ndarray]:
        """Decode one padded batch; see `engine.backend.Backend.run`."""
        padded, lengths = pad_batch(feats)
        language, textnorm = prompt_arrays(options)
        pin = self._device.type == "cuda"
        try:
            with torch.inference_mode():
                ids, out_lens = self._model(
                    _to_device(padded, self._device, pin).to(self._dtype),
                    _to_device(lengths, self._device, pin),
                    _to_device(language, self._device, pin),
                    _to_device(textnorm, self._device, pin),
                )
                ids_host = ids.cpu().numpy()
                lens_host = out_lens.cpu().numpy()
        except torch.OutOfMemoryError as exc:
            raise BackendOutOfMemoryError(f"{self._label}: {exc}") from exc
        return [ids_host[i, : int(lens_host[i])].copy() for i in range(len(feats))]


def _to_device(array: np.ndarray, device: torch.device, pin: bool) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    if pin:
        # Pinned host memory lets the copy run asynchronously with the launch queue.
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=pin)
