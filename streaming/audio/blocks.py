"""Fixed-size re-blocking of a sample stream, so a detector's output ignores client chunking."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]


def as_mono_float(samples: npt.ArrayLike) -> FloatArray:
    """Validate one chunk of mono float samples."""
    audio = np.asarray(samples, dtype=np.float32)
    if audio.ndim != 1:
        raise ValueError(f"input must be 1-D mono samples; got shape {audio.shape}")
    if not np.isfinite(audio).all():
        raise ValueError("input contains NaN or infinite samples")
    return audio


class Reblocker:
    """Collects samples and yields them in blocks of exactly `size`."""

    def __init__(self, size: int) -> None:
        if size <= 0:
            raise ValueError("block size must be positive")
        self._block = np.zeros(size, dtype=np.float32)
        self._filled = 0

    @property
    def size(self) -> int:
        return int(self._block.shape[0])

    @property
    def pending(self) -> int:
        """Samples waiting for a full block."""
        return self._filled

    def feed(self, audio: FloatArray) -> Iterator[FloatArray]:
        """Yield every completed block (a fresh copy each) as the samples arrive."""
        start = 0
        while start < audio.size:
            take = min(self.size - self._filled, audio.size - start)
            self._block[self._filled : self._filled + take] = audio[start : start + take]
            self._filled += take
            start += take
            if self._filled == self.size:
                self._filled = 0
                yield self._block.copy()

    def take_rest(self) -> FloatArray:
        """The incomplete last block (possibly empty), emptying the buffer."""
        rest = self._block[: self._filled].copy()
        self._filled = 0
        return rest
