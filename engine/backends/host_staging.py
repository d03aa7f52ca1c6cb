"""A host buffer reused across batches, page-locked on CUDA, that tensors are packed into.

Pinning a fresh tensor on every call costs a page-locking syscall per input, and copies
from pageable memory cannot overlap anything. One pinned buffer, grown on demand and
reused, lets each batch go to the device in a single asynchronous copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

ALIGN = 64  # bytes; every slot starts here so any dtype view of it is aligned
GROWTH = 1.5  # grow by at least this factor so a slowly rising batch size reallocates rarely
ROUND = 1 << 20  # and round capacity up to whole MiB

Spec = tuple[tuple[int, ...], np.dtype]


@dataclass(frozen=True, slots=True)
class Slot:
    """Where one tensor lives in the buffer."""

    offset: int
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def plan(specs: Sequence[Spec]) -> tuple[list[Slot], int]:
    """Aligned slots for (shape, dtype) specs, and the bytes they span."""
    slots: list[Slot] = []
    offset = 0
    for shape, dtype in specs:
        slot = Slot(offset, tuple(int(d) for d in shape), np.dtype(dtype))
        slots.append(slot)
        offset += -(-slot.nbytes // ALIGN) * ALIGN
    return slots, offset


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype with the same layout as a numpy dtype."""
    return torch.from_numpy(np.empty(0, dtype)).dtype


def torch_to_numpy(dtype: torch.dtype) -> np.dtype:
    """The numpy dtype with the same layout as a torch dtype."""
    return np.dtype(torch.empty(0, dtype=dtype).numpy().dtype)


class HostStaging:
    """One reusable host buffer; `reserve` hands out typed views, `upload` copies them over.

    The caller must not reserve again until the device has finished reading the previous
    upload: the backends synchronise on their outputs at the end of every batch, so the
    next batch always finds the buffer free.
    """

    def __init__(self, pin: bool) -> None:
        self._pin = pin
        self._buffer = torch.empty(0, dtype=torch.uint8)
        self._slots: list[Slot] = []
        self._used = 0
        self.reallocations = 0

    @property
    def capacity(self) -> int:
        return int(self._buffer.numel())

    @property
    def pinned(self) -> bool:
        return self._pin

    def reserve(self, specs: Sequence[Spec]) -> list[torch.Tensor]:
        """Host tensors for `specs`, views into the buffer (contents are left as they were)."""
        self._slots, self._used = plan(specs)
        self._ensure(self._used)
        return [self._view(self._buffer, slot) for slot in self._slots]

    def upload(self, device: torch.device) -> list[torch.Tensor]:
        """Copy the reserved bytes to `device` at once; typed device views of each slot."""
        flat = self._buffer[: self._used].to(device, non_blocking=self._pin)
        return [self._view(flat, slot) for slot in self._slots]

    def _ensure(self, nbytes: int) -> None:
        if nbytes <= self.capacity:
            return
        size = max(nbytes, int(self.capacity * GROWTH))
        size = -(-size // ROUND) * ROUND
        self._buffer = torch.empty(size, dtype=torch.uint8, pin_memory=self._pin)
        self.reallocations += 1

    @staticmethod
    def _view(flat: torch.Tensor, slot: Slot) -> torch.Tensor:
        raw = flat[slot.offset : slot.offset + slot.nbytes]
        return raw.view(torch_dtype(slot.dtype)).view(slot.shape)


def pack_padded(target: torch.Tensor, feats: Sequence[np.ndarray]) -> None:
    """Write [T_i] or [T_i, D] arrays into a [B, T_max(, D)] host tensor, zeroing the padding."""
    out = target.numpy()
    for i, f in enumerate(feats):
        out[i, : f.shape[0]] = f
        out[i, f.shape[0] :] = 0
