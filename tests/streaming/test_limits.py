"""Per-session limits: frame sizes, the audio-rate token bucket and session duration."""

from __future__ import annotations

import pytest

from streaming.errors import FrameTooLargeError, SessionLimitError
from streaming.events import ErrorEvent
from streaming.limits import RateMeter, SessionLimits
from streaming.session import Session, SessionConfig
from tests.streaming.fakes import EnergyVadModel, V1Session

SECOND = 16000


def test_the_pace_says_when_the_next_frame_may_be_read() -> None:
    meter = RateMeter(rate=2.0, burst_s=5.0, max_session_s=100.0)
    for i in range(50):  # 5 s of audio at real time: always within the bucket
        meter.admit(SECOND // 10, now=i * 0.1)
        assert meter.resume_at <= i * 0.1
    meter.admit(5 * SECOND, now=5.0)  # a 5 s burst on top is within it too
    assert meter.resume_at <= 5.0
    meter.admit(10 * SECOND, now=5.1)  # 10 s more: never refused, the reader waits
    # 20 s counted, 5 s of burst: the rest at 2x real time from the first frame, at 0.
    assert meter.resume_at == pytest.approx(7.5)


def test_session_duration_limit() -> None:
    meter = RateMeter(rate=2.0, burst_s=5.0, max_session_s=60.0)
    meter.admit(SECOND, now=0.0)
    meter.admit(SECOND, now=59.0)
    with pytest.raises(SessionLimitError):
        meter.admit(SECOND, now=61.0)


def test_frame_size_limits() -> None:
    limits = SessionLimits(max_frame_bytes=4096, max_text_bytes=512)
    limits.check_frame(4096, binary=True)
    with pytest.raises(FrameTooLargeError, match="4097"):
        limits.check_frame(4097, binary=True)
    with pytest.raises(FrameTooLargeError, match="text"):
        limits.check_frame(513, binary=False)


def session(limits: SessionLimits) -> Session:
    return V1Session(Session("s", SessionConfig(limits=limits), EnergyVadModel()), limits)


def test_session_paces_by_its_pace_never_refusing_audio() -> None:
    limits = SessionLimits(max_rate=2.0, max_replay_rate=50.0, burst_s=1.0)
    frame = b"\x00\x00" * SECOND  # one second of s16le
    live = session(limits)
    live.receive_audio(frame, now=0.0)
    live.receive_audio(frame, now=0.1)  # over 2x real time: taken, then paced
    assert live.resume_at == pytest.approx(0.5)  # (2 s - no burst yet) / 2x
    replay = session(limits)
    replay.receive_text('{"type":"start","pace":"replay"}', now=0.0)
    for _ in range(41):
        replay.receive_audio(frame, now=0.0)  # 41 s at once
    assert replay.resume_at == pytest.approx((41 - 1) / 50)
    assert not any(isinstance(e, ErrorEvent) for e in replay.events_to_send())


def test_session_rejects_oversized_frames_before_decoding() -> None:
    s = session(SessionLimits(max_frame_bytes=2048, max_text_bytes=300))
    with pytest.raises(FrameTooLargeError):
        s.receive_audio(b"\x00" * 2049, now=0.0)
    with pytest.raises(FrameTooLargeError):
        s.receive_text('{"type":"start"}' + " " * 300, now=0.0)


def test_limits_validate() -> None:
    with pytest.raises(ValueError):
        SessionLimits(max_rate=10.0, max_replay_rate=5.0)
    with pytest.raises(ValueError):
        SessionLimits(max_frame_bytes=10)
