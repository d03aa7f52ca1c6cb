"""A resumable stream's side of a resume: acknowledgements about once a second of audio,
the finals handed out kept for a client that lost them, and the resent audio trimmed to
what the stream does not have."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.types import Transcript
from server.resume.stream import Resumption
from streaming.audio.decoder import AudioFormat
from streaming.commands import StreamOptions
from streaming.errors import ResumeRefusedError
from streaming.events import Acked, Configured, Failed, Final, Partial, Resumed
from streaming.limits import SessionLimits
from streaming.protocols.v1.codec import ResumeRequest, V1Codec


def final(utt_id: int) -> Final:
    return Final(utt_id, 0, 100, Transcript(f"u{utt_id}", "en", "neutral", "speech", True, ""))


def stream() -> Resumption:
    codec = V1Codec(SessionLimits())
    resumption = Resumption(codec, lambda stream_id: f"token-for-{stream_id}")
    configured = Configured("s1", AudioFormat(), StreamOptions(), "m", False, stream_id="call")
    codec.encode(configured)
    resumption.configured(configured)
    return resumption


def test_audio_is_acknowledged_about_once_a_second_half_a_second_behind() -> None:
    s = stream()
    s.codec.decode(b"\0" * 2 * 23999)  # half a second more, and a sample short of a second
    assert s.ack(16000) is None
    s.codec.decode(b"\0\0")
    assert s.ack(16000) == Acked(16000)  # the client keeps the last half second
    assert s.ack(16000) is None  # nothing new
    s.codec.decode(b"\0" * 2 * 16000)
    assert s.ack(16000) == Acked(32000)


def test_a_stream_is_handed_over_a_little_before_the_audio_taken_never_before_the_ack() -> None:
    s = stream()
    s.codec.decode(b"\0" * 2 * 40000)
    acked = s.ack(16000)
    for event in (final(0), Partial(1, 0, 10, "x", 0), final(3)):
        s.handed(event)
    handover = s.handover("s1", "call", 16000)
    assert acked == Acked(32000)
    # 0.3 s back from 40000 samples: the VAD there hears again what may be speech starting.
    assert handover.samples == 40000 - 4800 and handover.clock_ms == 2200
    assert handover.next_utt_id == 4 and handover.finals == (final(0), final(3))
    assert handover.stream_id == "call" and handover.key == "call"
    # Taken up elsewhere and handed on again before any new audio: from the same place,
    # not 0.3 s further back (the client may already have forgotten that).
    again = stream()
    again.codec.adopt(None, handover.samples)
    again.adopted(handover)
    assert again.handover("s1", "call", 16000).samples == handover.samples


def test_a_hand_over_never_goes_back_into_audio_a_final_decided() -> None:
    s = stream()
    s.codec.decode(b"\0" * 2 * 40000)  # 2.5 s
    s.ack(16000)
    s.handed(Final(0, 0, 2400, final(0).transcript))  # it ends 0.1 s before the cut
    assert s.handover("s1", "call", 16000).samples == 2400 * 16


def test_a_resume_gets_the_finals_after_its_last_and_a_fresh_token() -> None:
    s = stream()
    s.codec.decode(b"\0" * 2 * 32000)
    for event in (final(0), Partial(1, 0, 10, "x", 0), final(1), Failed(2, 0, 100, "oom", "no")):
        s.handed(event)
    out = s.resume(ResumeRequest("t", samples=16000, last_utt_id=0), stopped=False)
    assert out == [
        Resumed(32000, "token-for-call", False),
        final(1),
        Failed(2, 0, 100, "oom", "no"),
    ]
    everything = s.resume(ResumeRequest("t", samples=32000, last_utt_id=None), stopped=True)
    assert everything[0] == Resumed(32000, "token-for-call", True)
    assert everything[1:] == [final(0), final(1), Failed(2, 0, 100, "oom", "no")]


def test_resent_audio_is_trimmed_to_what_the_stream_lacks() -> None:
    s = stream()
    s.codec.decode(b"\1" * 2 * 1000)
    s.resume(ResumeRequest("t", samples=400, last_utt_id=None), stopped=False)
    # 600 samples (1200 bytes) of the resent audio are already in the stream.
    assert s.trim(b"\1" * 1000) == b""
    assert s.trim(b"\1" * 200 + b"\2" * 100) == b"\2" * 100
    assert s.trim(b"\3" * 10) == b"\3" * 10


def test_a_resume_from_past_the_audio_taken_is_refused() -> None:
    s = stream()
    s.codec.decode(b"\0" * 2 * 1000)
    with pytest.raises(ResumeRefusedError, match="at most that"):
        s.resume(ResumeRequest("t", samples=1001, last_utt_id=None), stopped=False)


def stereo_stream() -> Resumption:
    codec = V1Codec(SessionLimits())
    resumption = Resumption(codec, lambda stream_id: "t2")
    audio = AudioFormat(channels=2)
    configured = Configured("s2", audio, StreamOptions(), "m", False, ("agent", "customer"))
    codec.encode(configured)
    resumption.configured(configured)
    return resumption


def test_a_two_channel_stream_replays_each_channels_finals_after_its_last() -> None:
    s = stereo_stream()
    s.codec.decode(b"\0" * 4 * 100)  # 100 stereo frames
    assert s.codec.samples_taken == 100
    finals = [replace(final(k), channel=c) for c, k in ((0, 0), (1, 0), (0, 1), (1, 1), (1, 2))]
    for event in finals:
        s.handed(event)
    out = s.resume(ResumeRequest("t", 50, last_utt_ids=(0, None)), stopped=False)
    assert out[1:] == [finals[1], finals[2], finals[3], finals[4]]
    out = s.resume(ResumeRequest("t", 50, last_utt_ids=(1, 1)), stopped=False)
    assert out[1:] == [finals[4]]


def test_a_two_channel_resume_must_name_each_channels_last_final() -> None:
    s = stereo_stream()
    for request in (ResumeRequest("t", 0, last_utt_id=3), ResumeRequest("t", 0, last_utt_ids=(1,))):
        with pytest.raises(ResumeRefusedError, match="last_utt_ids"):
            s.resume(request, stopped=False)
