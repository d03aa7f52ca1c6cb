"""Session acceptance on real espeak-ng speech with the real FSMN VAD (and webrtc)."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from engine.types import InferenceRequest, RequestKind
from streaming.events import Final
from streaming.segmenter import SegmenterConfig
from streaming.session import Session, SessionConfig
from streaming.vad.fsmn import FsmnVadModel
from streaming.vad.types import VadModel
from streaming.vad.webrtc import WebrtcVadModel
from tests.speech import Clip, chunks, energy_regions, long_speech, three_sentences, to_s16le
from tests.streaming.fakes import V1Session, answer, final_requests

SR = 16000
TOLERANCE = 300 * SR // 1000


@pytest.fixture(scope="module")
def fsmn() -> FsmnVadModel:
    return FsmnVadModel.from_package()


@pytest.fixture(scope="module")
def signal(speech_clips: list[Clip]) -> np.ndarray:
    return three_sentences(speech_clips)


def stream(
    vad: VadModel,
    data: bytes,
    chunk: int,
    start: str | None = None,
    config: SessionConfig | None = None,
    bytes_per_s: int = 32000,
) -> tuple[list[InferenceRequest], list[Final]]:
    """Feed a whole stream, answering every request; return all requests and the finals."""
    session = V1Session(Session("t", config or SessionConfig(), vad))
    if start:
        session.receive_text(start, now=0.0)
    requests: list[InferenceRequest] = []
    events = []
    for i, piece in enumerate(chunks(data, chunk)):
        session.receive_audio(piece, now=i * chunk / bytes_per_s)  # a real-time fake clock
        for r in session.requests_to_submit():
            requests.append(r)
            session.receive_result(answer(r), now=0.0)
        events += session.events_to_send()
    session.receive_text('{"type":"stop"}', now=0.0)
    for r in session.requests_to_submit():
        requests.append(r)
        session.receive_result(answer(r), now=0.0)
    events += session.events_to_send()
    assert session.finished
    return requests, [e for e in events if isinstance(e, Final)]


def finals_of(requests: list[InferenceRequest]) -> list[InferenceRequest]:
    return final_requests(requests)


def test_chunk_size_does_not_change_segments_or_request_audio(
    fsmn: FsmnVadModel, signal: np.ndarray
) -> None:
    data = to_s16le(signal)
    # 10 ms, 37 ms plus an odd byte, 100 ms and 1 s frames.
    runs = [stream(fsmn, data, size)[0] for size in (320, 1185, 3200, 32000)]
    reference = runs[0]
    assert len(finals_of(reference)) == 3
    assert any(r.kind is RequestKind.PARTIAL for r in reference)
    for other in runs[1:]:
        assert [(r.kind, r.utterance_id, r.start_sample) for r in other] == [
            (r.kind, r.utterance_id, r.start_sample) for r in reference
        ]
        for a, b in zip(other, reference, strict=True):
            np.testing.assert_array_equal(a.audio, b.audio)


def test_requests_carry_the_exact_source_samples(fsmn: FsmnVadModel, signal: np.ndarray) -> None:
    data = to_s16le(signal)
    source = np.frombuffer(data, "<i2").astype(np.float32) / 32768
    requests, _ = stream(fsmn, data, 3200)
    for r in requests:
        np.testing.assert_array_equal(
            r.audio, source[r.start_sample : r.start_sample + r.num_samples]
        )


@pytest.mark.parametrize("vad_name", ["fsmn", "webrtc"])
def test_three_sentences_give_three_finals_near_the_speech(
    vad_name: str, fsmn: FsmnVadModel, signal: np.ndarray
) -> None:
    vad: VadModel = fsmn if vad_name == "fsmn" else WebrtcVadModel()
    requests, finals = stream(vad, to_s16le(signal), 3200)
    assert len(finals) == 3
    reference = energy_regions(signal)
    assert len(reference) == 3
    for r, (ref_start, ref_end) in zip(finals_of(requests), reference, strict=True):
        assert abs(r.start_sample - ref_start) <= TOLERANCE, (vad_name, r.start_sample, ref_start)
        end = r.start_sample + r.num_samples
        assert abs(end - ref_end) <= TOLERANCE, (vad_name, end, ref_end)
    for final, r in zip(finals, finals_of(requests), strict=True):
        assert final.start_ms == r.start_sample * 1000 // SR


def sox_convert(audio: np.ndarray, tmp: Path, *args: str) -> bytes:
    """Convert 16 kHz audio with sox, as a telephony or capture chain would."""
    wav = tmp / "in.wav"
    sf.write(wav, audio, SR, subtype="FLOAT")
    out = tmp / "out.raw"
    subprocess.run(["sox", str(wav), *args, str(out)], check=True, capture_output=True)
    return out.read_bytes()


def test_telephone_and_studio_formats_give_the_same_segments(
    fsmn: FsmnVadModel, signal: np.ndarray, tmp_path: Path
) -> None:
    mulaw = sox_convert(signal, tmp_path, "-r", "8000", "-e", "mu-law", "-b", "8", "-t", "raw")
    f32 = sox_convert(
        signal, tmp_path, "-r", "48000", "-c", "2", "-e", "floating-point", "-b", "32", "-t", "raw"
    )
    tel = '{"type":"start","sample_rate":8000,"encoding":"mulaw"}'
    studio = '{"type":"start","sample_rate":48000,"encoding":"pcm_f32le","channels":2}'
    _, tel_finals = stream(fsmn, mulaw, 160, tel, bytes_per_s=8000)
    _, studio_finals = stream(fsmn, f32, 9600, studio, bytes_per_s=48000 * 2 * 4)
    _, plain_finals = stream(fsmn, to_s16le(signal), 3200)
    assert len(tel_finals) == len(studio_finals) == len(plain_finals) == 3
    for a, b in zip(tel_finals, plain_finals, strict=True):
        assert abs(a.start_ms - b.start_ms) <= 150 and abs(a.end_ms - b.end_ms) <= 150


def test_long_speech_is_cut_with_no_sample_lost_or_repeated(
    fsmn: FsmnVadModel, tmp_path: Path
) -> None:
    audio = long_speech(tmp_path, 40.0)
    data = to_s16le(audio)
    source = np.frombuffer(data, "<i2").astype(np.float32) / 32768
    requests, finals = stream(fsmn, data, 3200)
    finals_req = finals_of(requests)
    assert len(finals) >= 3
    max_samples = SegmenterConfig().max_samples
    for a, b in itertools.pairwise(finals_req):
        assert a.num_samples <= max_samples
        if a.num_samples == max_samples:  # a forced cut: the next one starts right there
            assert b.start_sample == a.start_sample + a.num_samples
    covered = sum(r.num_samples for r in finals_req)
    span = finals_req[-1].start_sample + finals_req[-1].num_samples - finals_req[0].start_sample
    assert covered <= span  # no sample appears twice
    forced = [r for r in finals_req if r.num_samples == max_samples]
    assert len(forced) >= 2
    for r in finals_req:
        np.testing.assert_array_equal(
            r.audio, source[r.start_sample : r.start_sample + r.num_samples]
        )


def test_stop_in_mid_speech_produces_a_final(fsmn: FsmnVadModel, signal: np.ndarray) -> None:
    second = energy_regions(signal)[1]
    cut = (second[0] + second[1]) // 2
    _, finals = stream(fsmn, to_s16le(signal[:cut]), 3200)
    assert len(finals) == 2
    assert finals[-1].end_ms == cut * 1000 // SR


@pytest.mark.parametrize("vad_name", ["fsmn", "webrtc"])
def test_real_pauses_are_decoded_early_and_the_finals_match_a_late_decode(
    vad_name: str, fsmn: FsmnVadModel, signal: np.ndarray
) -> None:
    # The VAD's pending end must be exactly where its SPEECH_END then lands: otherwise the
    # early decode is never used and each final waits a whole decode after the end-silence.
    vad: VadModel = fsmn if vad_name == "fsmn" else WebrtcVadModel()
    data = to_s16le(signal)
    early, early_finals = stream(vad, data, 3200)
    late, late_finals = stream(vad, data, 3200, config=SessionConfig(early_final_ms=0))
    used = finals_of(early)
    assert sum(r.kind is RequestKind.EARLY for r in used) >= 2, [r.kind for r in used]
    assert [(f.start_ms, f.end_ms) for f in early_finals] == [
        (f.start_ms, f.end_ms) for f in late_finals
    ]
    assert [f.transcript.text for f in early_finals] == [f.transcript.text for f in late_finals]
    for e, f in zip(used, finals_of(late), strict=True):
        np.testing.assert_array_equal(e.audio, f.audio)
