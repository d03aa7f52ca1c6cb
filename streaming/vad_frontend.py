"""funasr_onnx's streaming FSMN-VAD frontend with one kaldi-native-fbank per stream.

`WavFrontendOnline.fbank` builds a new `OnlineFbank` for every 100 ms block (its mel banks
and FFT set-up included) and feeds it the block plus the window overlap kept from the
last one, as a Python list. At many sessions that frontend was the event loop's largest
cost (31% of it at 64 streams). A frame depends only on its own 25 ms of samples, so
one fbank per stream, fed each block's new samples once, yields the very same frames;
everything else the rest of funasr's frontend reads (`input_cache`, the waveforms
returned, `fbanks`, `fbanks_lens`) is computed as funasr computes it.
"""

from __future__ import annotations

import copy
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

        def fbank(self, input: np.ndarray, input_lengths: np.ndarray) -> tuple[Any, Any, Any]:
            if input.shape[0] != 1:  # funasr's own batch path; the VAD never takes it
                original: tuple[Any, Any, Any] = super().fbank(input, input_lengths)
                return original
            return _fbank(self, input)

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

    def restart(self) -> None:
        self._fbank = knf.OnlineFbank(self._opts)
        self._read = 0

    @property
    def consumed(self) -> bool:
        return self._read > 0 or self._fbank.num_frames_ready > 0

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


def _fbank(frontend: Any, block: np.ndarray) -> tuple[Any, Any, Any]:
    """funasr_onnx 0.4's `WavFrontendOnline.fbank` for one row, frames from the stream."""
    stream: StreamFbank = frontend.stream_fbank
    if frontend.input_cache is None:
        if stream.consumed:  # funasr's frontend was reset under us: so is the stream
            stream.restart()
        frontend.input_cache = np.empty((1, 0), dtype=np.float32)
    joined = np.concatenate((frontend.input_cache, block), axis=1)
    shift, length = frontend.frame_shift_sample_length, frontend.frame_sample_length
    frame_num = frontend.compute_frame_num(joined.shape[-1], length, shift)
    frontend.input_cache = joined[:, -(joined.shape[-1] - frame_num * shift) :]
    feat = stream.frames(np.ascontiguousarray(block[0] * (1 << 15), np.float32))
    if feat.shape[0] != frame_num:
        raise RuntimeError(f"fbank stream gave {feat.shape[0]} frames where funasr has {frame_num}")
    waveforms: Any = np.empty(0, dtype=np.float32)
    feats_pad: Any = np.empty(0, dtype=np.float32)
    feats_lens: Any = np.empty(0, dtype=np.int32)
    if frame_num:
        waveforms = joined[:, : (frame_num - 1) * shift + length]
        feats_pad = feat[np.newaxis]
        feats_lens = np.array([feat.shape[0]], dtype=np.int32)
    frontend.fbanks = feats_pad
    frontend.fbanks_lens = copy.deepcopy(feats_lens)
    return waveforms, feats_pad, feats_lens
