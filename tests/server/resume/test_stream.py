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


def test_a_stream_is_handed_over_at_the_last_finals_end_never_before_the_ack() -> None:
    s = stream()
    s.codec.decode(b"\0" * 2 * 40000)
    acked = s.ack(16000)
    for event in (final(0), Partial(1, 0, 10, "x", 0), Final(3, 0, 1800, final(3).transcript)):
        s.handed(event)
    handover = s.handover("s1", "call", 16000)
    assert acked == Acked(32000)  # 2 s: past the last final's end, so the ack rules
    assert handover.samples == 32000 and handover.clock_ms == 2000
    assert handover.next_utt_id == 4 and handover.finals[0] == final(0)
    assert handover.stream_id == "call" and handover.key == "call"
    # Taken up elsewhere and handed on again before any new audio: from the same place.
    again = stream()
    again.codec.adopt(None, handover.samples)
    again.adopted(handover)
    assert again.handover("s1", "call", 16000).samples == handover.samples


def test_a_hand_over_goes_back_to_the_last_finals_end() -> None:
    # The next worker's VAD hears the whole pause again: started late in it, a VAD can
    # find the next utterance's start elsewhere than this worker's would have.
    s = stream()
    s.codec.decode(b"\0" * 2 * 40000)  # 2.5 s
    s.ack(16000, settled_ms=1200)  # the session settled what lies 1.2 s before its VAD
    s.handed(Final(0, 0, 1500, final(0).transcript))
    assert s.handover_ms(16000) == 1500
    assert s.handover("s1", "call", 16000).samples == 1500 * 16


def test_an_utterance_dropped_unfinished_keeps_its_number() -> None:
    s = stream()
    s.codec.decode(b"\0" * 2 * 40000)
    s.handed(final(0))
    s.handed(Partial(1, 1000, 2000, "x", 0))  # the client saw it begin
    assert s.handover("s1", "call", 16000).next_utt_id == 2
    assert s.handover("s1", "call", 16000, reopen=1).next_utt_id == 1


def test_acknowledgements_never_pass_what_the_session_settled() -> None:
    # An utterance open since 0.8 s: a hand-over mid-way goes back to its start, which
    # the client must still hold.
    s = stream()
    s.codec.decode(b"\0" * 2 * 48000)  # 3 s
    assert s.ack(16000, settled_ms=800) is None  # less than a second since the last
    s.codec.decode(b"\0" * 2 * 16000)
    assert s.ack(16000, settled_ms=1200) == Acked(1200 * 16)


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
