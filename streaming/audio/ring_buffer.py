"""A bounded float32 ring buffer addressed by absolute sample index."""

from __future__ import annotations

import numpy as np

from streaming.errors import AudioOverwrittenError


class RingBuffer:
    """Keeps the newest `capacity` samples of a stream; indices count from stream start."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self._data = np.zeros(capacity, dtype=np.float32)
        self._end = 0

    @property
    def capacity(self) -> int:
        return int(self._data.shape[0])

    @property
    def end(self) -> int:
        """Absolute index one past the newest sample."""
        return self._end

    @property
    def start(self) -> int:
        """Absolute index of the oldest sample still held."""
        return max(0, self._end - self.capacity)

    def write(self, samples: np.ndarray) -> None:
        """Append samples, overwriting the oldest once full (at most two slice copies)."""
        n = int(samples.shape[0])
        if n == 0:
            return
        cap = self.capacity
        if n >= cap:
            # Only the newest `cap` samples can survive this write.
            self._end += n - cap
            samples = samples[n - cap :]
            n = cap
        pos = self._end % cap
        first = min(n, cap - pos)
        self._data[pos : pos + first] = samples[:first]
        self._data[: n - first] = samples[first:]
        self._end += n

    def read(self, begin: int, end: int) -> np.ndarray:
        """A copy of samples [begin, end); raises if any of them was overwritten."""
        if begin > end or begin < 0:
            raise ValueError(f"bad range [{begin}, {end})")
        if end > self._end:
            raise ValueError(f"range [{begin}, {end}) reaches past the newest sample {self._end}")
        if begin < self.start:
            raise AudioOverwrittenError(
                f"samples [{begin}, {self.start}) were overwritten (capacity {self.capacity})"
            )
        cap = self.capacity
        n = end - begin
        lo = begin % cap
        if lo + n <= cap:
            return self._data[lo : lo + n].copy()
        return np.concatenate((self._data[lo:], self._data[: lo + n - cap]))
