"""The lean frontend gives funasr_onnx's frontend's features exactly, call by call, and with
the lean endpointer the FSMN VAD's events on real espeak speech are funasr's own."""

from __future__ import annotations

import numpy as np
import pytest

from streaming.vad.fsmn import FsmnVadModel, _funasr_onnx_leaf, _read_config, package_model_dir
from streaming.vad.fsmn_frontend import LowFrameRate, streaming_fbank_frontend
from streaming.vad.types import VadConfig, VadEvent
from tests.speech import Clip, three_sentences

#: 100 ms blocks as the VAD sends them, and ragged sizes: under one frame, one hop, odd.
BLOCKS = (1600, 1600, 100, 160, 399, 400, 401, 1601, 3200, 7, 1600, 2500)
#: A stream that opens with blocks under a frame, then too few frames for one LFR output.
SMALL_FIRST = (1, 7, 160, 399, 100, 560, 400, 1600, 13, 3200)


@pytest.fixture(scope="module")
def speech(speech_clips: list[Clip]) -> np.ndarray:
    return three_sentences(speech_clips)


def frontends() -> tuple[object, object]:
    base = _funasr_onnx_leaf("frontend").WavFrontendOnline
    conf = {**_read_config(package_model_dir())["frontend_conf"], "dither": 0.0}
    cmvn = str(package_model_dir() / "am.mvn")
    return base(cmvn_file=cmvn, **conf), streaming_fbank_frontend(base, cmvn)(
        cmvn_file=cmvn, **conf
    )


def extract(frontend: object, block: np.ndarray) -> np.ndarray:
    """The call's features, [1, T, dims]; no features (T = 0) as an empty [1, 0, dims]."""
    lengths = np.array([block.size], dtype=np.int32)
    feats, _ = frontend.extract_fbank(block[np.newaxis, :], lengths, False)  # type: ignore[attr-defined]
    return feats if feats.size else np.empty((1, 0, 400), feats.dtype)


@pytest.mark.parametrize("blocks", [BLOCKS, SMALL_FIRST])
def test_every_call_gives_funasrs_features(speech: np.ndarray, blocks: tuple[int, ...]) -> None:
    # Not funasr's waveforms: the stream cuts its frames' audio from its own buffer.
    reference, ours = frontends()
    position, calls, frames = 0, 0, 0
    while position < speech.size:
        size = blocks[calls % len(blocks)]
        block = speech[position : position + size]
        want, got = extract(reference, block), extract(ours, block)
        assert got.shape == want.shape, f"call {calls} (block of {size})"
        if want.size:
            assert got.dtype == want.dtype
            assert np.array_equal(got, want), f"call {calls} (block of {size})"
        position, calls, frames = position + size, calls + 1, frames + want.shape[1]
    assert calls > 100 and frames > 1000


def test_streams_share_one_parse_of_the_statistics() -> None:
    base = _funasr_onnx_leaf("frontend").WavFrontendOnline
    conf = {**_read_config(package_model_dir())["frontend_conf"], "dither": 0.0}
    cmvn = str(package_model_dir() / "am.mvn")
    cls = streaming_fbank_frontend(base, cmvn)
    first, second = cls(cmvn_file=cmvn, **conf), cls(cmvn_file=cmvn, **conf)
    assert first.cmvn is second.cmvn and not first.cmvn.flags.writeable
    assert np.array_equal(first.cmvn, base(cmvn_file=cmvn, **conf).cmvn)


def test_the_end_of_stream_path_is_refused() -> None:
    # The VAD closes a stream itself (FsmnVadStream.flush); funasr's padded tail is not ours.
    _, ours = frontends()
    with pytest.raises(ValueError, match="is_final"):
        ours.extract_fbank(np.zeros((1, 1600), np.float32), np.array([1600]), True)  # type: ignore[attr-defined]


@pytest.mark.parametrize("m", [1, 3, 5, 7])
def test_low_frame_rate_stacks_m_frames_with_the_first_repeated_before(m: int) -> None:
    frames = np.arange(40, dtype=np.float32).reshape(20, 2)
    lfr, outputs = LowFrameRate(m, 1), []
    for start, stop in ((0, 1), (1, 2), (2, 9), (9, 9), (9, 20)):
        out = lfr.stack(frames[start:stop])
        outputs.extend([] if out is None else list(out))
    padded = np.concatenate([np.repeat(frames[:1], (m - 1) // 2, axis=0), frames])
    want = [padded[i : i + m].reshape(-1) for i in range(len(padded) - m + 1)]
    assert np.array_equal(np.array(outputs), np.array(want))


def test_low_frame_rate_takes_only_a_shift_of_one() -> None:
    with pytest.raises(ValueError, match="shift of 1"):
        LowFrameRate(5, 2)


def test_vad_events_are_unchanged(speech: np.ndarray) -> None:
    # funasr's own frontend and endpointer against ours: events and pending ends.
    ours = FsmnVadModel.from_package()
    reference = FsmnVadModel.from_package()
    reference._frontend_cls = _funasr_onnx_leaf("frontend").WavFrontendOnline
    reference._scorer_cls = _funasr_onnx_leaf("e2e_vad").E2EVadModel
    results: list[list[tuple[list[VadEvent], int | None]]] = []
    for model in (reference, ours):
        stream = model.new_stream(VadConfig(end_silence_ms=300))
        said = [
            (stream.accept(speech[start : start + 1600]), stream.pending_end())
            for start in range(0, speech.size, 1600)
        ]
        results.append([*said, (stream.flush(), None)])
    events = [e for step, _ in results[0] for e in step]
    assert len(events) >= 6  # three sentences (a long pause may split one at 300 ms)
    assert sum(1 for _, pending in results[0] if pending is not None) >= 5
    assert results[1] == results[0]
