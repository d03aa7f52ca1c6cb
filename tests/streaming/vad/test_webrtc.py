"""WebRTC VAD adapter on real espeak-ng speech: boundaries, chunk invariance, flush, isolation."""

from __future__ import annotations

import numpy as np
import pytest

from streaming.vad.types import VadConfig, VadEvent, VadEventKind
from streaming.vad.webrtc import FRAME_SAMPLES, WebrtcVadModel
from tests.speech import Clip, energy_regions, three_sentences

# The signal and the reference live with the FSMN tests so both detectors face the same audio.
from tests.streaming.vad.test_fsmn import (
    CHUNK_SIZES,
    SR,
    TOLERANCE_MS,
    boundary_errors_ms,
    feed,
    regions,
)


@pytest.fixture(scope="module")
def model() -> WebrtcVadModel:
    return WebrtcVadModel()


@pytest.fixture(scope="module")
def signal(speech_clips: list[Clip]) -> np.ndarray:
    return three_sentences(speech_clips)


@pytest.fixture(scope="module")
def baseline(model: WebrtcVadModel, signal: np.ndarray) -> list[VadEvent]:
    return feed(model.new_stream(VadConfig()), signal, 1600)


@pytest.mark.parametrize("aggressiveness", [0, 1, 2, 3])
def test_finds_the_three_sentences(signal: np.ndarray, aggressiveness: int) -> None:
    found = regions(feed(WebrtcVadModel(aggressiveness).new_stream(VadConfig()), signal))
    assert len(found) == 3
    for start_error, end_error in boundary_errors_ms(found, energy_regions(signal)):
        assert abs(start_error) <= TOLERANCE_MS
        assert abs(end_error) <= TOLERANCE_MS


@pytest.mark.parametrize("chunk", CHUNK_SIZES)
def test_events_do_not_depend_on_chunking(
    model: WebrtcVadModel, signal: np.ndarray, baseline: list[VadEvent], chunk: int | None
) -> None:
    assert feed(model.new_stream(VadConfig()), signal, chunk) == baseline


def test_flush_in_mid_speech_closes_at_stream_end(
    model: WebrtcVadModel, signal: np.ndarray
) -> None:
    second = energy_regions(signal)[1]
    cut = (second[0] + second[1]) // 2 + 7  # not on a frame boundary
    found = regions(feed(model.new_stream(VadConfig()), signal[:cut], 592))
    assert len(found) == 2
    assert found[-1][1] == cut


@pytest.mark.parametrize("length", [0, 1, FRAME_SAMPLES - 1, FRAME_SAMPLES, 12_345])
def test_any_stream_length_flushes_cleanly(
    model: WebrtcVadModel, signal: np.ndarray, length: int
) -> None:
    start = energy_regions(signal)[2][0]
    found = regions(feed(model.new_stream(VadConfig()), signal[start : start + length], 592))
    assert all(0 <= begin < end for begin, end in found)
    if found:
        assert found[-1][1] == length


def test_end_silence_decides_when_speech_ends(model: WebrtcVadModel, signal: np.ndarray) -> None:
    """The ~1.9 s gaps (1.5 s plus espeak's own edges) end speech at 500 ms but not at 3 s."""
    found = regions(feed(model.new_stream(VadConfig(end_silence_ms=3000)), signal))
    assert len(found) == 1
    assert found[0][1] == signal.size


def test_end_is_decided_after_end_silence(model: WebrtcVadModel, signal: np.ndarray) -> None:
    """A speech end is reported once end_silence_ms of unvoiced audio has been fed, not before."""
    stream = model.new_stream(VadConfig(end_silence_ms=500))
    fed_when_decided = []
    for start in range(0, signal.size, 160):
        for event in stream.accept(signal[start : start + 160]):
            fed_when_decided.append((event, start + 160))
    ends = [(e.sample, fed) for e, fed in fed_when_decided if e.kind is VadEventKind.SPEECH_END]
    assert len(ends) == 3
    for end, fed in ends:
        assert 500 * 16 <= fed - end < (500 + 30 + 10) * 16


def test_interleaved_streams_keep_their_own_state(
    model: WebrtcVadModel, signal: np.ndarray, speech_clips: list[Clip], baseline: list[VadEvent]
) -> None:
    pause = np.zeros(SR, np.float32)
    other = np.concatenate([pause, speech_clips[4].audio, pause, speech_clips[2].audio, pause])
    other_alone = feed(model.new_stream(VadConfig()), other, 1600)
    first, second = model.new_stream(VadConfig()), model.new_stream(VadConfig())
    got_first: list[VadEvent] = []
    got_second: list[VadEvent] = []
    for index in range(max(signal.size // 592, other.size // 1000) + 1):
        got_first += first.accept(signal[index * 592 : (index + 1) * 592])
        got_second += second.accept(other[index * 1000 : (index + 1) * 1000])
    got_first += first.flush()
    got_second += second.flush()
    assert got_first == baseline
    assert got_second == other_alone
    assert len(regions(other_alone)) >= 2


def test_rejects_bad_input_and_use_after_flush(model: WebrtcVadModel) -> None:
    stream = model.new_stream(VadConfig())
    with pytest.raises(ValueError, match="1-D"):
        stream.accept(np.zeros((2, 480), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        stream.accept(np.full(480, np.inf, np.float32))
    assert stream.flush() == []
    with pytest.raises(RuntimeError, match="flush"):
        stream.accept(np.zeros(480, np.float32))


def test_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="aggressiveness"):
        WebrtcVadModel(4)
    with pytest.raises(ValueError, match="start_frames"):
        WebrtcVadModel(ring_frames=5, start_frames=6)
