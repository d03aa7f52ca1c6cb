"""OnnxBackend: the exported encoder+CTC+argmax graph on onnxruntime (CPU, CUDA, TensorRT)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import BackendOutOfMemoryError, BackendUnavailableError
from engine.frontend import pad_batch
from engine.model_dir import ModelDir
from engine.prompts import prompt_arrays
from engine.types import DecodeOptions

CPU_PRECISIONS = ("fp32", "int8")
CUDA_PRECISIONS = ("fp32", "fp16")


def select_providers(device: str, precision: str, tensorrt: bool = False) -> list[Any]:
    """Execution providers for `device`, checked against what this onnxruntime offers."""
    import onnxruntime as ort

    available = set(ort.get_available_providers())
    if device == "cpu":
        if precision not in CPU_PRECISIONS:
            raise BackendUnavailableError(
                f"ONNX on the CPU runs {' or '.join(CPU_PRECISIONS)}, not {precision}"
            )
        return ["CPUExecutionProvider"]
    kind, _, index = device.partition(":")
    if kind != "cuda":
        raise BackendUnavailableError(f"onnx backend runs on cpu or cuda[:N], not {device!r}")
    if "CUDAExecutionProvider" not in available:
        raise BackendUnavailableError(
            "CUDAExecutionProvider is missing: install onnxruntime-gpu (the `gpu` extra)"
        )
    if precision not in CUDA_PRECISIONS:
        # int8 MatMulInteger has no CUDA kernel and silently falls back to the CPU.
        raise BackendUnavailableError(f"ONNX on CUDA runs fp16 or fp32, not {precision}")
    device_id = int(index or 0)
    cuda = (
        "CUDAExecutionProvider",
        # EXHAUSTIVE (the default) re-tunes convolutions for every new input length.
        {"device_id": device_id, "cudnn_conv_algo_search": "HEURISTIC"},
    )
    providers: list[Any] = [cuda, "CPUExecutionProvider"]
    if tensorrt and "TensorrtExecutionProvider" in available:
        trt = {"device_id": device_id, "trt_fp16_enable": precision == "fp16"}
        providers.insert(0, ("TensorrtExecutionProvider", trt))
    return providers


class OnnxBackend:
    """Runs padded batches through one onnxruntime session."""

    def __init__(
        self,
        model_dir: ModelDir,
        *,
        device: str = "cpu",
        precision: str = "int8",
        threads: int | None = None,
        onnx_path: Path | None = None,
        tensorrt: bool = False,
    ) -> None:
        import onnxruntime as ort

        providers = select_providers(device, precision, tensorrt)
        path = onnx_path or model_dir.onnx_path(precision)
        if not path.is_file():
            raise BackendUnavailableError(
                f"{path} does not exist: run `python scripts/export_onnx.py --model "
                f"{model_dir.path}{_export_flag(precision)}` first"
            )
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        if threads is not None:
            options.intra_op_num_threads = threads
        options.log_severity_level = 3
        # The arena keeps the high-water mark of every batch shape it has seen; without it
        # memory follows the batch in flight, which the scheduler's budget bounds.
        options.enable_cpu_mem_arena = False
        self._session = ort.InferenceSession(str(path), options, providers=providers)
        self._label = f"onnx-{precision}-{device.partition(':')[0]}"

    @property
    def name(self) -> str:
        return self._label

    def run(
        self, feats: Sequence[np.ndarray], options: Sequence[DecodeOptions]
    ) -> list[np.ndarray]:
        """Decode one padded batch; see `engine.backend.Backend.run`."""
        padded, lengths = pad_batch(feats)
        language, textnorm = prompt_arrays(options)
        inputs = {
            "speech": padded,
            "speech_lengths": lengths,
            "language": language,
            "textnorm": textnorm,
        }
        try:
            ids, lens = self._session.run(["token_ids", "token_lens"], inputs)
        except Exception as exc:
            if "allocate" in str(exc).lower():
                raise BackendOutOfMemoryError(f"{self._label}: {exc}") from exc
            raise
        return [np.asarray(ids[i, : int(lens[i])], dtype=np.int32) for i in range(len(feats))]


def _export_flag(precision: str) -> str:
    return {"int8": " --int8", "fp16": " --fp16"}.get(precision, "")
