"""Kaldi fbank + LFR + CMVN features for SenseVoice, matching funasr's WavFrontend without torch."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kaldi_native_fbank as knf
import numpy as np
import numpy.typing as npt

from engine.errors import AudioError, ModelDirIncompleteError
from engine.types import SAMPLE_RATE

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int32]

#: Window types that both Kaldi (kaldi-native-fbank) and torchaudio's Kaldi port implement.
WINDOW_TYPES = frozenset({"hamming", "hanning", "povey", "rectangular", "blackman"})

#: funasr scales [-1, 1] float audio to the int16 range before fbank (`upsacle_samples`).
INT16_SCALE = np.float32(1 << 15)
#: Kaldi's (and torchaudio's) defaults that funasr relies on; both frontends use them.
PREEMPH_COEFF = 0.97
LOW_FREQ_HZ = 20.0


@dataclass(frozen=True, slots=True)
class FrontendConfig:
    """Fbank and LFR settings; the defaults are SenseVoiceSmall's `frontend_conf`."""

    sample_rate: int = SAMPLE_RATE
    n_mels: int = 80
    frame_length_ms: float = 25.0
    frame_shift_ms: float = 10.0
    window: str = "hamming"
    lfr_m: int = 7
    lfr_n: int = 6
    dither: float = 0.0

    def __post_init__(self) -> None:
        for name in ("sample_rate", "n_mels", "lfr_m", "lfr_n"):
            if getattr(self, name) <= 0:
                raise ValueError(f"frontend {name} must be positive; got {getattr(self, name)}")
        if self.window_samples <= 0 or self.shift_samples <= 0:
            raise ValueError(
                f"frame length {self.frame_length_ms} ms and shift {self.frame_shift_ms} ms "
                f"must each cover at least one sample at {self.sample_rate} Hz"
            )
        if self.window not in WINDOW_TYPES:
            raise ValueError(
                f"window must be one of {', '.join(sorted(WINDOW_TYPES))}; got {self.window!r}"
            )
        if not math.isfinite(self.dither) or self.dither < 0:
            raise ValueError(f"dither must be a finite value >= 0; got {self.dither}")

    @classmethod
    def from_mapping(cls, frontend_conf: Mapping[str, Any]) -> FrontendConfig:
        """Build from funasr's config.yaml `frontend_conf` (missing keys keep our defaults)."""
        # funasr would also run with snip_edges False or unscaled samples; we implement neither,
        # so refuse such a config rather than compute features the model was not trained on.
        if not frontend_conf.get("snip_edges", True):
            raise ValueError("frontend_conf snip_edges: false is not supported")
        if not frontend_conf.get("upsacle_samples", True):
            raise ValueError("frontend_conf upsacle_samples: false is not supported")
        default = cls()
        try:
            return cls(
                sample_rate=int(frontend_conf.get("fs", default.sample_rate)),
                n_mels=int(frontend_conf.get("n_mels", default.n_mels)),
                frame_length_ms=float(frontend_conf.get("frame_length", default.frame_length_ms)),
                frame_shift_ms=float(frontend_conf.get("frame_shift", default.frame_shift_ms)),
                window=str(frontend_conf.get("window", default.window)),
                lfr_m=int(frontend_conf.get("lfr_m", default.lfr_m)),
                lfr_n=int(frontend_conf.get("lfr_n", default.lfr_n)),
                # funasr's own default dither is 1.0, which makes features random; the
                # published configs omit the key, so 0.0 (deterministic) is our default.
                dither=float(frontend_conf.get("dither", default.dither)),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"invalid frontend_conf {dict(frontend_conf)!r}: {exc}") from exc

    @property
    def window_samples(self) -> int:
        """Samples per analysis window, rounded down as Kaldi does."""
        return int(self.sample_rate * 0.001 * self.frame_length_ms)

    @property
    def shift_samples(self) -> int:
        """Samples between window starts, rounded down as Kaldi does."""
        return int(self.sample_rate * 0.001 * self.frame_shift_ms)

    @property
    def feature_dim(self) -> int:
        """Width of one LFR frame."""
        return self.n_mels * self.lfr_m


@dataclass(frozen=True)
class Cmvn:
    """Global CMVN from a Kaldi-nnet `am.mvn`: features become `(x + shift) * scale`."""

    shift: FloatArray
    scale: FloatArray

    def __post_init__(self) -> None:
        if self.shift.ndim != 1 or self.shift.shape != self.scale.shape or self.shift.size == 0:
            raise ValueError(
                f"CMVN shift and scale must be equal-length non-empty vectors; "
                f"got {self.shift.shape} and {self.scale.shape}"
            )

    @property
    def dim(self) -> int:
        """Feature width this CMVN applies to."""
        return int(self.shift.shape[0])

    @classmethod
    def from_file(cls, path: str | Path) -> Cmvn:
        """Parse `<AddShift>` and `<Rescale>` blocks of a Kaldi-nnet text file."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelDirIncompleteError(f"cannot read CMVN file {path}: {exc}") from exc
        tokens = text.split()
        shift = _parse_nnet_block(tokens, "<AddShift>", path)
        scale = _parse_nnet_block(tokens, "<Rescale>", path)
        if shift.shape != scale.shape:
            raise ModelDirIncompleteError(
                f"{path}: <AddShift> has {shift.size} values but <Rescale> has {scale.size}"
            )
        return cls(shift=shift, scale=scale)


def _parse_nnet_block(tokens: list[str], name: str, path: Path) -> FloatArray:
    """Read `<Name> out in <LearnRateCoef> c [ v1 ... vn ]` as a float32 vector."""
    starts = [i for i, tok in enumerate(tokens) if tok == name]
    if len(starts) != 1:
        raise ModelDirIncompleteError(
            f"{path}: expected exactly one {name} block, found {len(starts)}"
        )
    i = starts[0]
    head = tokens[i + 1 : i + 6]
    if len(head) < 5 or head[2] != "<LearnRateCoef>" or head[4] != "[":
        raise ModelDirIncompleteError(
            f"{path}: {name} must be followed by '<dim> <dim> <LearnRateCoef> <c> [', got {head}"
        )
    try:
        close = tokens.index("]", i + 6)
        dims = (int(head[0]), int(head[1]))
        values = np.array(tokens[i + 6 : close], dtype=np.float64)
    except ValueError as exc:
        raise ModelDirIncompleteError(f"{path}: malformed {name} block: {exc}") from exc
    if values.size == 0 or dims != (values.size, values.size):
        raise ModelDirIncompleteError(
            f"{path}: {name} declares dims {dims} but holds {values.size} values"
        )
    if not np.isfinite(values).all():
        raise ModelDirIncompleteError(f"{path}: {name} holds non-finite values")
    return values.astype(np.float32)


def apply_lfr(feats: FloatArray, lfr_m: int, lfr_n: int) -> FloatArray:
    """Stack `lfr_m` frames every `lfr_n` exactly like funasr's `apply_lfr`."""
    num_in = feats.shape[0]
    if num_in == 0:
        return np.zeros((0, feats.shape[1] * lfr_m), dtype=np.float32)
    num_out = -(-num_in // lfr_n)
    # Output frame i stacks input frames i*n - (m-1)//2 ... + m-1; funasr pads the left with
    # copies of frame 0 and the tail with copies of the last frame, which clipping reproduces.
    index = np.arange(num_out)[:, None] * lfr_n + np.arange(lfr_m)[None, :] - (lfr_m - 1) // 2
    np.clip(index, 0, num_in - 1, out=index)
    return feats[index].reshape(num_out, lfr_m * feats.shape[1]).astype(np.float32, copy=False)


class Frontend:
    """Float audio in [-1, 1] to CMVN-normalised LFR fbank features, as funasr computes them."""

    def __init__(self, config: FrontendConfig, cmvn: Cmvn) -> None:
        if cmvn.dim != config.feature_dim:
            raise ValueError(
                f"CMVN is {cmvn.dim}-dimensional but the frontend makes {config.feature_dim}-dim "
                f"features (n_mels {config.n_mels} x lfr_m {config.lfr_m})"
            )
        self.config = config
        self.cmvn = cmvn
        self._opts = _fbank_options(config)

    @classmethod
    def from_model_dir(cls, path: str | Path) -> Frontend:
        """Read `config.yaml` (frontend_conf) and `am.mvn` from a SenseVoice model dir."""
        import yaml  # only this constructor needs it

        path = Path(path)
        config_path = path / "config.yaml"
        try:
            raw = yaml.safe_load(config_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ModelDirIncompleteError(f"cannot read {config_path}: {exc}") from exc
        conf = raw.get("frontend_conf") if isinstance(raw, dict) else None
        if not isinstance(conf, dict):
            raise ModelDirIncompleteError(f"{config_path} has no frontend_conf mapping")
        frontend = raw.get("frontend", "WavFrontend")
        if frontend not in ("WavFrontend", "wav_frontend"):
            raise ModelDirIncompleteError(
                f"{config_path}: frontend {frontend!r} is not supported (only WavFrontend)"
            )
        try:
            return cls(FrontendConfig.from_mapping(conf), Cmvn.from_file(path / "am.mvn"))
        except ValueError as exc:
            raise ModelDirIncompleteError(f"{path}: {exc}") from exc

    @property
    def feature_dim(self) -> int:
        """Width of one output frame (n_mels * lfr_m)."""
        return self.config.feature_dim

    def num_frames(self, num_samples: int) -> int:
        """The number of LFR frames `features` returns for this many samples (0 if too short)."""
        if num_samples < 0:
            raise ValueError(f"num_samples must be >= 0; got {num_samples}")
        cfg = self.config
        if num_samples < cfg.window_samples:
            return 0
        fbank_frames = 1 + (num_samples - cfg.window_samples) // cfg.shift_samples
        return -(-fbank_frames // cfg.lfr_n)

    def features(self, audio: npt.NDArray[Any]) -> FloatArray:
        """Features [T_lfr, n_mels * lfr_m] for float32 mono audio at the configured rate."""
        self.check_audio(audio)
        fbank = self._fbank(audio)
        lfr = apply_lfr(fbank, self.config.lfr_m, self.config.lfr_n)
        lfr += self.cmvn.shift
        lfr *= self.cmvn.scale
        return lfr

    def check_audio(self, audio: npt.NDArray[Any]) -> None:
        """Raise AudioError for anything `features` cannot turn into frames."""
        if not isinstance(audio, np.ndarray):
            raise AudioError(f"audio must be a numpy array; got {type(audio).__name__}")
        if audio.dtype != np.float32:
            raise AudioError(f"audio must be float32 in [-1, 1]; got dtype {audio.dtype}")
        if audio.ndim != 1:
            raise AudioError(f"audio must be mono (1-D); got shape {audio.shape}")
        if audio.size == 0:
            raise AudioError("audio is empty")
        window = self.config.window_samples
        if audio.size < window:
            rate = self.config.sample_rate
            raise AudioError(
                f"audio is too short: {audio.size} samples ({1000 * audio.size / rate:.1f} ms) "
                f"is less than one {window}-sample analysis window at {rate} Hz"
            )
        if not np.isfinite(audio).all():
            raise AudioError("audio contains NaN or infinite samples")

    def _fbank(self, audio: FloatArray) -> FloatArray:
        """Log-mel fbank [T, n_mels] from kaldi-native-fbank."""
        scaled = np.ascontiguousarray(audio * INT16_SCALE, dtype=np.float32)
        fbank = knf.OnlineFbank(self._opts)
        # A memoryview (`.data`) converts to knf's C++ vector about twice as fast as the
        # ndarray itself, which the binding walks element by element as numpy scalars.
        fbank.accept_waveform(float(self.config.sample_rate), scaled.data)
        fbank.input_finished()
        # knf has no batch read; get_frame returns a view into its buffer, so copy each out.
        out = np.empty((fbank.num_frames_ready, self.config.n_mels), dtype=np.float32)
        for i in range(out.shape[0]):
            out[i] = fbank.get_frame(i)
        return out


def _fbank_options(config: FrontendConfig) -> Any:
    """kaldi-native-fbank options equal to funasr's `kaldi.fbank(...)` call in WavFrontend."""
    opts = knf.FbankOptions()
    frame = opts.frame_opts
    frame.samp_freq = float(config.sample_rate)
    frame.frame_length_ms = float(config.frame_length_ms)
    frame.frame_shift_ms = float(config.frame_shift_ms)
    frame.dither = float(config.dither)
    frame.window_type = config.window
    frame.snip_edges = True
    # torchaudio / Kaldi defaults that funasr relies on; set explicitly so a knf default
    # change cannot alter the features silently.
    frame.preemph_coeff = PREEMPH_COEFF
    frame.remove_dc_offset = True
    frame.round_to_power_of_two = True
    opts.mel_opts.num_bins = config.n_mels
    opts.mel_opts.low_freq = LOW_FREQ_HZ
    opts.mel_opts.high_freq = 0.0
    opts.energy_floor = 0.0
    opts.use_energy = False
    opts.raw_energy = True
    opts.use_log_fbank = True
    opts.use_power = True
    opts.htk_compat = False
    return opts


def pad_batch(feats: Sequence[FloatArray]) -> tuple[FloatArray, IntArray]:
    """Zero-pad [T_i, D] feature arrays to [B, T_max, D] float32 plus int32 lengths."""
    if len(feats) == 0:
        raise ValueError("pad_batch needs at least one feature array")
    dims = {f.shape[1] if f.ndim == 2 else -1 for f in feats}
    if len(dims) != 1 or -1 in dims:
        shapes = [f.shape for f in feats]
        raise ValueError(f"pad_batch needs 2-D arrays of one width; got shapes {shapes}")
    lengths = np.array([f.shape[0] for f in feats], dtype=np.int32)
    batch = np.zeros((len(feats), int(lengths.max()), dims.pop()), dtype=np.float32)
    for i, f in enumerate(feats):
        batch[i, : f.shape[0]] = f
    return batch, lengths
