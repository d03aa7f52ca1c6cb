"""engine.features.fbank against funasr's WavFrontend, and edge cases of lengths, audio, CMVN."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import AudioError, ModelDirIncompleteError
from engine.features.fbank import Cmvn, Frontend, FrontendConfig, apply_lfr, pad_batch
from tests.speech import Clip


@pytest.fixture(scope="module")
def frontend(tiny_model_dir: Path) -> Frontend:
    """The real SenseVoiceSmall frontend config and CMVN (a test model carries both)."""
    return Frontend.from_model_dir(tiny_model_dir)


@pytest.fixture(scope="module")
def am_mvn(tiny_model_dir: Path) -> Path:
    return tiny_model_dir / "am.mvn"


@pytest.fixture(scope="module")
def funasr_frontend(am_mvn: Path) -> Any:
    wav_frontend = pytest.importorskip("funasr.frontends.wav_frontend")
    return wav_frontend.WavFrontend(
        cmvn_file=str(am_mvn), fs=16000, window="hamming", n_mels=80, frame_length=25,
        frame_shift=10, lfr_m=7, lfr_n=6, dither=0.0,
    )  # fmt: skip


def funasr_features(funasr_frontend: Any, audio: np.ndarray) -> np.ndarray:
    torch = pytest.importorskip("torch")
    wav = torch.from_numpy(audio.copy())[None, :]
    feats, lens = funasr_frontend(wav, torch.tensor([audio.shape[0]]))
    return feats[0, : int(lens[0])].numpy()


def test_matches_funasr_on_speech(
    frontend: Frontend, funasr_frontend: Any, speech_clips: list[Clip]
) -> None:
    worst = 0.0
    for clip in speech_clips:
        ours = frontend.features(clip.audio)
        ref = funasr_features(funasr_frontend, clip.audio)
        assert ours.dtype == np.float32
        assert ours.shape == ref.shape, clip.name
        assert ours.shape == (frontend.num_frames(clip.audio.size), 560)
        worst = max(worst, float(np.abs(ours - ref).max()))
    assert worst <= 1e-4


@pytest.mark.parametrize("num_samples", [400, 401, 559, 560, 561, 1000, 1200, 1360, 16000, 16001])
def test_matches_funasr_at_edge_lengths(
    frontend: Frontend, funasr_frontend: Any, num_samples: int
) -> None:
    audio = np.random.default_rng(num_samples).uniform(-0.5, 0.5, num_samples).astype(np.float32)
    ours = frontend.features(audio)
    ref = funasr_features(funasr_frontend, audio)
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-4)


def test_lfr_matches_funasr_for_every_small_length() -> None:
    torch = pytest.importorskip("torch")
    wav_frontend = pytest.importorskip("funasr.frontends.wav_frontend")
    rng = np.random.default_rng(0)
    for num_in in range(1, 200):
        feats = rng.standard_normal((num_in, 3)).astype(np.float32)
        ref = wav_frontend.apply_lfr(torch.from_numpy(feats), 7, 6).numpy()
        np.testing.assert_array_equal(apply_lfr(feats, 7, 6), ref, err_msg=f"T={num_in}")


@pytest.mark.parametrize(
    "num_samples", [400, 401, 559, 560, 561, 1000, 1199, 1200, 1201, 1360, 1361, 16000, 160000]
)
def test_num_frames_matches_features_at_edges(frontend: Frontend, num_samples: int) -> None:
    audio = np.zeros(num_samples, dtype=np.float32)
    assert frontend.num_frames(num_samples) == frontend.features(audio).shape[0]


@settings(max_examples=60, deadline=None)
@given(num_samples=st.integers(min_value=400, max_value=40000))
def test_num_frames_matches_features(frontend: Frontend, num_samples: int) -> None:
    audio = np.full(num_samples, 0.01, dtype=np.float32)
    assert frontend.num_frames(num_samples) == frontend.features(audio).shape[0]


def test_num_frames_short_and_negative(frontend: Frontend) -> None:
    assert frontend.num_frames(0) == 0
    assert frontend.num_frames(399) == 0
    assert frontend.num_frames(400) == 1
    assert frontend.num_frames(400 + 6 * 160) == 2  # 7 fbank frames
    with pytest.raises(ValueError):
        frontend.num_frames(-1)


def test_feature_dim(frontend: Frontend) -> None:
    assert frontend.feature_dim == 560
    assert frontend.config == FrontendConfig()


@pytest.mark.parametrize(
    ("audio", "message"),
    [
        (np.zeros(0, dtype=np.float32), "empty"),
        (np.zeros(399, dtype=np.float32), "too short"),
        (np.array([0.0] * 500 + [np.nan] + [0.0] * 500, dtype=np.float32), "NaN"),
        (np.array([0.0] * 500 + [np.inf] + [0.0] * 500, dtype=np.float32), "infinite"),
        (np.array([0.0] * 500 + [-np.inf] + [0.0] * 500, dtype=np.float32), "infinite"),
        (np.zeros(1000, dtype=np.float64), "float32"),
        (np.zeros(1000, dtype=np.int16), "float32"),
        (np.zeros((2, 1000), dtype=np.float32), "mono"),
    ],
)
def test_bad_audio_raises(frontend: Frontend, audio: np.ndarray, message: str) -> None:
    with pytest.raises(AudioError, match=message):
        frontend.features(audio)


def test_features_are_deterministic(frontend: Frontend) -> None:
    audio = np.random.default_rng(1).uniform(-1, 1, 8000).astype(np.float32)
    np.testing.assert_array_equal(frontend.features(audio), frontend.features(audio))


def test_cmvn_parses_the_real_am_mvn(am_mvn: Path) -> None:
    cmvn = Cmvn.from_file(am_mvn)
    assert cmvn.shift.shape == (560,)
    assert cmvn.scale.shape == (560,)
    assert cmvn.shift.dtype == np.float32 and cmvn.scale.dtype == np.float32
    assert cmvn.shift[0] == pytest.approx(-8.311879)
    assert cmvn.scale[0] == pytest.approx(0.155775)
    assert np.all(cmvn.scale > 0)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "<Nnet>\n<AddShift> 2 2\n<LearnRateCoef> 0 [ 1 2 ]\n</Nnet>\n",
        "<AddShift> 2 2\n<LearnRateCoef> 0 [ 1 2 ]\n<Rescale> 2 2\n<LearnRateCoef> 0 [ 1 ]\n",
        "<AddShift> 2 2\n<LearnRateCoef> 0 [ 1 x ]\n<Rescale> 2 2\n<LearnRateCoef> 0 [ 1 2 ]\n",
        "<AddShift> 2 2\n<LearnRateCoef> 0 [ 1 2\n<Rescale> 2 2\n<LearnRateCoef> 0 [ 1 2 ]\n",
        "<AddShift> 2 2\n[ 1 2 ]\n<Rescale> 2 2\n<LearnRateCoef> 0 [ 1 2 ]\n",
        "<AddShift> 2 2\n<LearnRateCoef> 0 [ 1 nan ]\n<Rescale> 2 2\n<LearnRateCoef> 0 [ 1 2 ]\n",
    ],
)
def test_cmvn_rejects_malformed(tmp_path: Path, text: str) -> None:
    path = tmp_path / "am.mvn"
    path.write_text(text)
    with pytest.raises(ModelDirIncompleteError, match=r"am\.mvn"):
        Cmvn.from_file(path)


def test_cmvn_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelDirIncompleteError):
        Cmvn.from_file(tmp_path / "missing.mvn")


def test_from_model_dir_missing_files(tmp_path: Path) -> None:
    with pytest.raises(ModelDirIncompleteError, match=r"config\.yaml"):
        Frontend.from_model_dir(tmp_path)
    (tmp_path / "config.yaml").write_text("model: SenseVoiceSmall\n")
    with pytest.raises(ModelDirIncompleteError, match="frontend_conf"):
        Frontend.from_model_dir(tmp_path)
    (tmp_path / "config.yaml").write_text("frontend_conf:\n  fs: 16000\n")
    with pytest.raises(ModelDirIncompleteError, match=r"am\.mvn"):
        Frontend.from_model_dir(tmp_path)


def test_cmvn_dim_must_match_config(am_mvn: Path) -> None:
    cmvn = Cmvn.from_file(am_mvn)
    with pytest.raises(ValueError, match="560"):
        Frontend(FrontendConfig(lfr_m=5), cmvn)


def test_config_from_mapping() -> None:
    conf = {"fs": 16000, "window": "hamming", "n_mels": 80, "frame_length": 25,
            "frame_shift": 10, "lfr_m": 7, "lfr_n": 6, "cmvn_file": None}  # fmt: skip
    assert FrontendConfig.from_mapping(conf) == FrontendConfig()
    assert FrontendConfig.from_mapping({**conf, "dither": 1.0}).dither == 1.0
    assert FrontendConfig.from_mapping({}).dither == 0.0
    for bad in ({"window": "bogus"}, {"lfr_n": 0}, {"snip_edges": False}, {"fs": "x"}):
        with pytest.raises(ValueError):
            FrontendConfig.from_mapping(bad)


def test_pad_batch() -> None:
    a = np.ones((3, 4), dtype=np.float32)
    b = np.full((5, 4), 2.0, dtype=np.float32)
    c = np.zeros((0, 4), dtype=np.float32)
    batch, lengths = pad_batch([a, b, c])
    assert batch.shape == (3, 5, 4) and batch.dtype == np.float32
    assert lengths.dtype == np.int32 and lengths.tolist() == [3, 5, 0]
    np.testing.assert_array_equal(batch[0, :3], a)
    np.testing.assert_array_equal(batch[0, 3:], 0.0)
    np.testing.assert_array_equal(batch[1], b)
    np.testing.assert_array_equal(batch[2], 0.0)


def test_pad_batch_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        pad_batch([])
    with pytest.raises(ValueError):
        pad_batch([np.zeros((2, 4), np.float32), np.zeros((2, 5), np.float32)])
    with pytest.raises(ValueError):
        pad_batch([np.zeros(4, np.float32)])
