"""Per-session limits: frame sizes, audio pace (a token bucket), and session duration.

Audio faster than its pace is never an error: the bucket says when the client's next
frame may be read, and the server leaves it in the socket until then (TCP slows the
sender). Only a session past its length is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.types import SAMPLE_RATE
from streaming.errors import FrameTooLargeError, SessionLimitError

#: The largest text frame `max_text_bytes` may allow: reading (and refusing) one must cost
#: the event loop, shared by every stream, milliseconds; 15 MiB of JSON costs a second.
MAX_TEXT_BYTES_CEILING = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """Bounds on what one client may send. Rates are multiples of real time."""

    max_frame_bytes: int = 256 * 1024
    max_text_bytes: int = 4096
    max_rate: float = 2.0
    max_replay_rate: float = 200.0
    burst_s: float = 5.0
    max_session_s: float = 4 * 3600.0
    idle_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_frame_bytes < 1024 or self.max_text_bytes < 256:
            raise ValueError("frame limits must allow at least 1 KiB audio and 256 B text")
        if self.max_text_bytes > MAX_TEXT_BYTES_CEILING:
            raise ValueError(f"max_text_bytes may be at most {MAX_TEXT_BYTES_CEILING} (1 MiB)")
        if not 1.0 <= self.max_rate <= self.max_replay_rate:
            raise ValueError("need 1 <= max_rate <= max_replay_rate")
        if self.burst_s < 0 or self.max_session_s <= 0 or self.idle_timeout_s <= 0:
            raise ValueError("burst_s must be >= 0; durations must be positive")

    def check_frame(self, size: int, binary: bool) -> None:
        limit = self.max_frame_bytes if binary else self.max_text_bytes
        if size > limit:
            kind = "audio" if binary else "text"
            raise FrameTooLargeError(f"{kind} frame of {size} bytes is over the {limit} byte limit")


class RateMeter:
    """A token bucket in audio seconds: `rate` seconds of audio accrue per second of time."""

    def __init__(self, rate: float, burst_s: float, max_session_s: float) -> None:
        self._rate = rate
        self._burst = burst_s
        self._max_session = max_session_s
        self._first: float | None = None
        self._audio_s = 0.0

    def with_rate(self, rate: float, burst_s: float) -> RateMeter:
        """The same session's meter under a new rate: what was counted stays counted."""
        meter = RateMeter(rate, burst_s, self._max_session)
        meter._first, meter._audio_s = self._first, self._audio_s
        return meter

    def admit(self, samples: int, now: float) -> None:
        """Count `samples` of 16 kHz audio received at `now`; raise past the session's length."""
        if self._first is None:
            self._first = now
        if now - self._first > self._max_session:
            raise SessionLimitError(f"session exceeded its {self._max_session:.0f} s limit")
        self._audio_s += samples / SAMPLE_RATE

    @property
    def resume_at(self) -> float:
        """When the audio counted so far fits the bucket: no more is read before then."""
        if self._first is None:
            return float("-inf")
        return self._first + (self._audio_s - self._burst) / self._rate
