"""Skip markers for tests that need a GPU; they skip cleanly on CPU-only machines."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest
import torch

F = TypeVar("F", bound=Callable[..., object])


def ort_has_cuda() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


def _gpu_test(skip: bool, reason: str) -> Callable[[F], F]:
    def mark(test: F) -> F:
        marked: F = pytest.mark.gpu(pytest.mark.skipif(skip, reason=reason)(test))
        return marked

    return mark


needs_cuda = _gpu_test(not torch.cuda.is_available(), "needs a CUDA GPU")
needs_two_gpus = _gpu_test(torch.cuda.device_count() < 2, "needs two CUDA GPUs")
needs_ort_cuda = _gpu_test(
    not (torch.cuda.is_available() and ort_has_cuda()),
    "needs a CUDA GPU and onnxruntime's CUDAExecutionProvider",
)
