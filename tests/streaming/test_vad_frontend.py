"""The per-stream fbank frontend gives funasr_onnx's frontend's outputs exactly, and with the
lean endpointer the FSMN VAD's events on real espeak speech are funasr's own."""

from __future__ import annotations

import numpy as np
import pytest

from streaming.vad_frontend import streaming_fbank_frontend
from streaming.vad_fsmn import FsmnVadModel, _funasr_onnx_leaf, _read_config, package_model_dir
from streaming.vad_types import VadConfig, VadEvent
from tests.speech import Clip, three_sentences

#: 100 ms blocks as the VAD sends them, and ragged sizes: under one frame, one hop, odd.
BLOCKS = (1600, 1600, 100, 160, 399, 400, 401, 1601, 3200, 7, 1600, 2500)


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


def extract(frontend: object, block: np.ndarray) -> tuple[np.ndarray, ...]:
    lengths = np.array([block.size], dtype=np.int32)
    feats, lens = frontend.extract_fbank(block[np.newaxis, :], lengths, False)  # type: ignore[attr-defined]
    return feats, lens, frontend.get_waveforms()  # type: ignore[attr-defined]


def test_every_output_equals_funasrs(speech: np.ndarray) -> None:
    reference, ours = frontends()
    position, calls = 0, 0
    while position < speech.size:
        size = BLOCKS[calls % len(BLOCKS)]
        block = speech[position : position + size]
        want, got = extract(reference, block), extract(ours, block)
        for a, b in zip(want, got, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert np.array_equal(a, b), f"call {calls} (block of {size})"
        position, calls = position + size, calls + 1
    assert calls > 100


def test_streams_share_one_parse_of_the_statistics() -> None:
    base = _funasr_onnx_leaf("frontend").WavFrontendOnline
    conf = {**_read_config(package_model_dir())["frontend_conf"], "dither": 0.0}
    cmvn = str(package_model_dir() / "am.mvn")
    cls = streaming_fbank_frontend(base, cmvn)
    first, second = cls(cmvn_file=cmvn, **conf), cls(cmvn_file=cmvn, **conf)
    assert first.cmvn is second.cmvn and not first.cmvn.flags.writeable
    assert np.array_equal(first.cmvn, base(cmvn_file=cmvn, **conf).cmvn)


def test_a_reset_frontend_starts_its_fbank_again(speech: np.ndarray) -> None:
    reference, ours = frontends()
    for frontend in (reference, ours):
        extract(frontend, speech[:4000])
        frontend.input_cache = None  # what funasr's reset does to the part we read
        frontend.lfr_splice_cache, frontend.reserve_waveforms = [], None  # type: ignore[attr-defined]
    block = speech[20_000:21_600]
    for a, b in zip(extract(reference, block), extract(ours, block), strict=True):
        assert np.array_equal(a, b)


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
