"""Multichannel streams: one session per channel, channel-tagged events, one end."""

from __future__ import annotations

import numpy as np
import pytest

from engine.types import InferenceRequest
from streaming.audio.decoder import AudioFormat
from streaming.channels import ChannelGroup, ChannelSplitter
from streaming.commands import Audio, Configure, Stop
from streaming.errors import InvalidAudioError, InvalidFieldError, StateError
from streaming.events import Configured, Ended, ErrorEvent, Final, SpeechStarted
from streaming.segmenter import SegmenterConfig
from streaming.session import SessionConfig
from tests.speech import chunks, to_s16le
from tests.streaming.fakes import EnergyVadModel, answer, final_requests, stereo, tone_bursts

SR = 16000


# The agent speaks, then the customer talks over the agent's second turn.
LEFT = tone_bursts([(0.5, 2.0), (3.0, 4.5)], 6.0)
RIGHT = tone_bursts([(2.2, 3.6)], 6.0)


LABELS = ("agent", "customer")


def group() -> ChannelGroup:
    config = SessionConfig(segmenter=SegmenterConfig(preroll_ms=0))  # exact speech spans
    return ChannelGroup("call", config, EnergyVadModel(), LABELS)


def run(g: ChannelGroup, data: bytes, chunk: int) -> tuple[list, list[InferenceRequest]]:
    events: list = []
    requests: list[InferenceRequest] = []
    g.handle(Configure(AudioFormat(channels=2)), 0.0)
    for i, piece in enumerate(chunks(data, chunk)):
        g.handle(Audio(piece), i * chunk / (4 * SR))
        for request in g.requests_to_submit():
            requests.append(request)
            g.receive_result(answer(request), 0.0)
        events += g.events_to_send()
    g.handle(Stop(), 99.0)
    for request in g.requests_to_submit():
        requests.append(request)
        g.receive_result(answer(request), 99.0)
    return events + g.events_to_send(), requests


def test_each_channel_gets_its_own_utterances_and_finals() -> None:
    events, requests = run(group(), stereo(LEFT, RIGHT), 3200)
    assert isinstance(events[0], Configured) and events[0].audio.channels == 2
    assert isinstance(events[-1], Ended) and sum(isinstance(e, Ended) for e in events) == 1
    finals = [e for e in events if isinstance(e, Final)]
    spans = sorted((f.channel, f.start_ms // 100, round(f.end_ms / 100)) for f in finals)
    # Each channel's speech alone, however the two overlap in time.
    assert spans == [(0, 5, 20), (0, 30, 45), (1, 22, 36)]
    starts = [e.channel for e in events if isinstance(e, SpeechStarted)]
    assert sorted(starts) == [0, 0, 1]
    assert {r.session_id for r in requests} == {"call/0", "call/1"}
    # The audio each channel decodes is exactly that channel's source.
    sources = {"call/0": LEFT, "call/1": RIGHT}
    for r in final_requests(requests):
        source = np.frombuffer(to_s16le(sources[r.session_id]), "<i2").astype(np.float32) / 32768
        span = source[r.start_sample : r.start_sample + r.num_samples]
        np.testing.assert_array_equal(r.audio, span)


@pytest.mark.parametrize("chunk", [1, 7, 3203, 64000])
def test_frames_split_anywhere_give_the_same_requests(chunk: int) -> None:
    data = stereo(LEFT, RIGHT)
    _, reference = run(group(), data, 3200)
    _, got = run(group(), data, chunk)
    key = [(r.session_id, r.kind, r.start_sample, r.num_samples) for r in final_requests(got)]
    assert key == [
        (r.session_id, r.kind, r.start_sample, r.num_samples) for r in final_requests(reference)
    ]


def test_the_splitter_carries_partial_frames() -> None:
    splitter = ChannelSplitter(AudioFormat("pcm_s16le", 8000, 2))
    # A frame is one 2-byte sample per channel: nothing is split until a frame is whole.
    assert splitter.split(b"\x01\x02\x03") == [b"", b""]
    assert splitter.split(b"\x04\x05\x06\x07\x08") == [b"\x01\x02\x05\x06", b"\x03\x04\x07\x08"]


def test_a_format_with_the_wrong_channel_count_is_refused() -> None:
    g = group()
    with pytest.raises(InvalidFieldError):
        g.handle(Configure(AudioFormat(channels=1)), 0.0)
    with pytest.raises(InvalidFieldError):
        ChannelGroup("x", SessionConfig(), EnergyVadModel(), ["mono"])


def test_an_abort_reports_once_and_still_delivers_every_channels_finals() -> None:
    g = group()
    g.handle(Configure(AudioFormat("pcm_f32le", 16000, 2)), 0.0)
    both = np.stack([LEFT[: 3 * SR], RIGHT[: 3 * SR]], axis=1).astype("<f4").tobytes()
    g.handle(Audio(both), 0.0)
    g.abort(InvalidAudioError("NaN"), 0.1)
    for request in g.requests_to_submit():
        g.receive_result(answer(request), 0.2)
    events = g.events_to_send()
    assert [type(e) for e in events].count(ErrorEvent) == 1
    channels = {e.channel for e in events if isinstance(e, Final)}
    assert channels == {0, 1} and isinstance(events[-1], Ended) and g.finished


def test_labels_and_stream_id_ride_on_configured_and_are_fixed_once_started() -> None:
    g = group()
    fmt = AudioFormat("mulaw", 8000, 2)
    g.handle(Configure(fmt, channel_labels=LABELS, stream_id="CA123"), 0.0)
    (configured,) = g.events_to_send()
    assert isinstance(configured, Configured)
    assert configured.channel_labels == LABELS and configured.stream_id == "CA123"
    assert configured.session_id == "call" and configured.audio == fmt
    g.handle(Audio(b"\xff" * 1600), 0.0)
    with pytest.raises(StateError):
        g.handle(Configure(fmt, channel_labels=("a", "b")), 0.1)
    with pytest.raises(StateError):
        g.handle(Configure(fmt, stream_id="other"), 0.1)


def test_audio_for_one_channel_goes_to_that_channel_alone() -> None:
    g = group()
    g.handle(Configure(AudioFormat(channels=2), channel_labels=LABELS), 0.0)
    right, silence = to_s16le(RIGHT), to_s16le(np.zeros_like(LEFT))
    for i in range(0, len(right), 3200):  # 100 ms a piece, at real pace
        g.handle(Audio(right[i : i + 3200], channel=1), i / 32000)
        g.handle(Audio(silence[i : i + 3200], channel=0), i / 32000)
    g.handle(Stop(), 7.0)
    requests = final_requests(g.requests_to_submit())
    assert {r.session_id for r in requests} == {"call/1"}
    with pytest.raises(InvalidFieldError):
        group().handle(Audio(b"\0\0", channel=2), 0.0)


def test_configure_checks_labels_and_stream_ids() -> None:
    with pytest.raises(InvalidFieldError):
        Configure(AudioFormat(channels=2), channel_labels=("agent",))
    with pytest.raises(InvalidFieldError):
        Configure(AudioFormat(channels=2), channel_labels=("a", "a"))
    for bad in ("", "has space", "/slash", "x" * 129):
        with pytest.raises(InvalidFieldError):
            Configure(stream_id=bad)
    assert Configure(stream_id="CA0123:4.5-6_7").stream_id == "CA0123:4.5-6_7"


def test_a_configure_that_one_channel_refuses_changes_no_channel() -> None:
    g = group()
    fmt = AudioFormat(channels=2)
    g.handle(Configure(fmt, channel_labels=LABELS), 0.0)
    g.handle(Audio(to_s16le(RIGHT[:1600]), channel=1), 0.0)  # only the customer has spoken
    other = AudioFormat("mulaw", 8000, 2)
    with pytest.raises(StateError):
        g.handle(Configure(other, channel_labels=LABELS), 0.1)
    # The agent's channel, which had no audio yet, kept the stream's format too.
    assert [s._audio for s in g.channels] == [AudioFormat(), AudioFormat()]
