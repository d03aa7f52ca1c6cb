"""funasr_onnx's streaming FSMN-VAD frontend, lean: one fbank per stream, LFR by slicing.

`WavFrontendOnline` builds a new `OnlineFbank` for every 100 ms block (its mel banks and
FFT set-up included), feeds it the block plus the window overlap kept from the last one as
a Python list, stacks the LFR frames one by one, and keeps the block's waveforms for an
energy our stream computes from its own aligned audio. At many sessions that frontend was
the event loop's largest cost (31% of it at 64 streams). A frame depends only on its own
25 ms of samples, so one fbank per stream, fed each block's new samples once, yields the
very same frames; LFR stacks `lfr_m` consecutive frames (the first repeated as left
context), which a sliding window over the last `lfr_m - 1` frames and the new ones gives
without arithmetic; CMVN is the same sums and products. The features equal funasr's
bit for bit, call by call (tested); the waveforms are not kept.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import kaldi_native_fbank as knf
import numpy as np


def streaming_fbank_frontend(base: Any, cmvn_file: str | None = None) -> type:
    """A subclass of funasr_onnx's `WavFrontendOnline` (`base`) with a per-stream fbank.

    With `cmvn_file`, that file is parsed here once and every stream shares the (read-only)
    statistics, where funasr parses it again for each new stream.
    """
    shared = _read_cmvn(base, cmvn_file) if cmvn_file else None

    class StreamingFbankFrontend(base):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.stream_fbank = StreamFbank(self.opts)
            self.lfr = LowFrameRate(self.lfr_m, self.lfr_n)

        def load_cmvn(self) -> np.ndarray:
            if shared is not None and self.cmvn_file == cmvn_file:
                return shared
            loaded: np.ndarray = super().load_cmvn()
            return loaded

        def apply_cmvn(self, inputs: np.ndarray) -> np.ndarray:
            # funasr tiles the statistics to the block's shape first; broadcasting gives
            # the same sums and products without building them.
            dim = inputs.shape[1]
            out: np.ndarray = (inputs + self.cmvn[0, :dim]) * self.cmvn[1, :dim]
            return out

        def extract_fbank(
            self, input: np.ndarray, input_lengths: np.ndarray, is_final: bool = False
        ) -> tuple[np.ndarray, np.ndarray]:
            """Features [1, T, dims] and [T] as funasr's (no features: an empty array and
            [0], where funasr's lengths vary; the stream reads only the features)."""
            if input.shape[0] != 1 or is_final:
                # funasr's end-of-stream padding; the VAD closes a stream itself instead.
                raise ValueError("this frontend takes one stream's blocks, never is_final")
            fbank = self.stream_fbank.frames(
                np.ascontiguousarray(input[0, : int(input_lengths[0])] * (1 << 15), np.float32)
            )
            stacked = self.lfr.stack(fbank)
            if stacked is None:
                return np.empty(0, dtype=np.float32), np.zeros(1, dtype=np.int64)
            feats = self.apply_cmvn(stacked)
            return feats[np.newaxis], np.array([feats.shape[0]], dtype=np.int64)

    return StreamingFbankFrontend


def _read_cmvn(base: Any, path: str) -> np.ndarray:
    """funasr's own parser of `am.mvn`; it reads nothing of its instance but the path."""
    stats: np.ndarray = base.load_cmvn(SimpleNamespace(cmvn_file=path))
    stats.flags.writeable = False
    return stats


class StreamFbank:
    """One stream's fbank: samples in once, each frame read once, then dropped."""

    def __init__(self, opts: Any) -> None:
        self._opts = opts
        self._fbank = knf.OnlineFbank(opts)
        self._read = 0

    def frames(self, scaled: np.ndarray) -> np.ndarray:
        """Accept int16-scaled float32 samples; the frames they complete, [T, bins]."""
        fbank = self._fbank
        fbank.accept_waveform(self._opts.frame_opts.samp_freq, scaled.data)
        ready = fbank.num_frames_ready
        out = np.empty((ready - self._read, self._opts.mel_opts.num_bins), np.float32)
        for row, index in enumerate(range(self._read, ready)):
            out[row] = fbank.get_frame(index)
        # Frame indices stay absolute after a pop; only the memory goes.
        fbank.pop(ready - self._read)
        self._read = ready
        return out


class LowFrameRate:
    """Streaming LFR with a shift of one frame: each output is `m` consecutive frames."""

    def __init__(self, m: int, n: int) -> None:
        if n != 1 or m < 1:
            raise ValueError(f"LFR needs m >= 1 and a shift of 1 frame; got m={m}, n={n}")
        self._m = m
        self._context: np.ndarray | None = None  # the last m - 1 frames, left-padded at first

    def stack(self, frames: np.ndarray) -> np.ndarray | None:
        """The outputs these new frames complete, [T, m * bins] float32 (None: none yet)."""
        if frames.shape[0] == 0:
            return None
        if self._context is None:
            # funasr repeats the first frame as left context, (m - 1) // 2 times.
            self._context = np.repeat(frames[:1], (self._m - 1) // 2, axis=0)
        padded = np.concatenate((self._context, frames))
        count = padded.shape[0] - self._m + 1
        if count <= 0:
            self._context = padded
            return None
        self._context = padded[count:]
        # [count, m, bins] gathered, then each row frame-major as funasr's reshape of a slice.
        windows = padded[np.arange(count)[:, np.newaxis] + np.arange(self._m)]
        return windows.reshape(count, -1)
