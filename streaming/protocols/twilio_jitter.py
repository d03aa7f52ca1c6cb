"""A call's tracks placed by their timestamps: gaps become silence, late chunks are dropped.

Twilio stamps each media chunk with milliseconds since the stream started, one clock for
every track. A chunk stamped t belongs at sample t * rate / 1000 of its track; this keeps
each track's next sample (its position) and emits audio only in order:

- A chunk that starts at the position goes out at once: in-order audio is never held.
- A chunk that starts after it waits while a hole lies before it, for the chunk that
  fills the hole (frames shuffled by a few places). Once the newest audio of any track is
  `hold_ms` past the hole, the hole is lost: it becomes silence and the chunks after it
  go out. The deadline follows every track, so a track that falls silent (no frames at
  all) is filled as the call goes on and both channels stay on the call's clock.
- A chunk wholly before the position is dropped: a duplicate when a chunk with its
  timestamp was already taken, late otherwise. One that only overlaps it loses the
  overlapping head (its audio is already placed).
- A timestamp more than `max_jump_ms` past the newest audio is a clock step, not a
  silence: the stream's clock is rebased (every track alike) so at most that much silence
  is inserted. A Twilio stream never stops every track at once; an unbounded jump would
  otherwise become unbounded silence to decode (and trip the live rate limit).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

#: G.711 μ-law's code for a zero sample.
MULAW_SILENCE = 0xFF


@dataclass(frozen=True, slots=True)
class JitterConfig:
    """How long a hole may be waited for, and bounds on what one stream may make us hold."""

    rate: int = 8000  # samples per second; one byte per sample (G.711)
    hold_ms: int = 200  # ten 20 ms frames: reordering by a few frames fits with room
    max_jump_ms: int = 5000  # within the live rate limit's default 5 s burst
    max_pending: int = 64  # chunks held per track, whatever their timestamps
    remembered: int = 512  # recent timestamps per track, to tell duplicates from late

    @property
    def hold(self) -> int:
        return self.hold_ms * self.rate // 1000

    @property
    def max_jump(self) -> int:
        return self.max_jump_ms * self.rate // 1000


@dataclass(frozen=True, slots=True)
class Placed:
    """Audio ready for one track, contiguous with what that track got before."""

    track: int
    data: bytes


@dataclass(frozen=True, slots=True)
class JitterStats:
    """What placement has done so far, for logs and metrics."""

    duplicates: int = 0  # chunks whose timestamp was already taken
    late: int = 0  # chunks that came after their place had been played out
    silence_samples: int = 0  # samples of silence put in for holes
    clock_jumps: int = 0  # timestamps too far ahead, taken as a step of the clock


class _Recent:
    """The last N start positions taken on one track."""

    def __init__(self, size: int) -> None:
        self._order: deque[int] = deque()
        self._set: set[int] = set()
        self._size = size

    def __contains__(self, start: int) -> bool:
        return start in self._set

    def add(self, start: int) -> None:
        if start in self._set:
            return
        if len(self._order) >= self._size:
            self._set.discard(self._order.popleft())
        self._order.append(start)
        self._set.add(start)


class _Track:
    """One track's place on the clock and the chunks it holds back."""

    def __init__(self, remembered: int) -> None:
        self.position = 0  # the next sample this track emits
        self.pending: dict[int, bytes] = {}  # start sample -> audio, not yet emitted
        self.arrival_end = 0  # where the last chunk pushed ends (for unstamped chunks)
        self.recent = _Recent(remembered)


class Timeline:
    """Places the chunks of N tracks on the stream's clock (see the module's docstring)."""

    def __init__(self, tracks: int, config: JitterConfig | None = None) -> None:
        self._config = config or JitterConfig()
        self._tracks = [_Track(self._config.remembered) for _ in range(tracks)]
        self._horizon = 0  # the end of the newest audio on any track
        self._offset = 0  # samples subtracted from every timestamp since a clock step
        self._duplicates = 0
        self._late = 0
        self._silence = 0
        self._jumps = 0

    @property
    def stats(self) -> JitterStats:
        return JitterStats(self._duplicates, self._late, self._silence, self._jumps)

    def push(self, track: int, timestamp_ms: int | None, data: bytes) -> list[Placed]:
        """Take one chunk (None: no timestamp, so right after the track's last chunk)."""
        state = self._tracks[track]
        if timestamp_ms is None:
            start = state.arrival_end
        else:
            start = self._rebased(timestamp_ms * self._config.rate // 1000 - self._offset)
        end = start + len(data)
        state.arrival_end = end
        if not data:
            return []
        if end <= state.position or start in state.pending:
            self._drop(state, start)
            return []
        state.pending[start] = data
        self._horizon = max(self._horizon, end)
        return self._release(self._horizon - self._config.hold)

    def flush(self) -> list[Placed]:
        """The end of the stream: every hole is silence, every track runs to the newest end."""
        return self._release(self._horizon)

    def _rebased(self, start: int) -> int:
        limit = self._horizon + self._config.max_jump
        if start <= limit:
            return start
        self._jumps += 1
        self._offset += start - limit
        return limit

    def _drop(self, state: _Track, start: int) -> None:
        if start in state.recent or start in state.pending:
            self._duplicates += 1
        else:
            self._late += 1

    def _release(self, deadline: int) -> list[Placed]:
        out: list[Placed] = []
        for index, state in enumerate(self._tracks):
            pieces = self._release_track(state, deadline)
            if pieces:
                out.append(Placed(index, b"".join(pieces)))
        return out

    def _release_track(self, state: _Track, deadline: int) -> list[bytes]:
        """Emit what is in order; fill holes that are past the deadline (or too many held)."""
        pieces: list[bytes] = []
        while True:
            if state.pending:
                start = min(state.pending)
                if start <= state.position:
                    pieces.append(self._take(state, start))
                    continue
                crowded = len(state.pending) > self._config.max_pending
                target = start if crowded else min(start, deadline)
            else:
                target = deadline
            if target <= state.position:
                return [p for p in pieces if p]
            gap = target - state.position
            pieces.append(bytes([MULAW_SILENCE]) * gap)
            self._silence += gap
            state.position = target

    def _take(self, state: _Track, start: int) -> bytes:
        """The held chunk at `start` (at or before the position), less what is placed."""
        data = state.pending.pop(start)
        skip = state.position - start
        if skip >= len(data):
            self._drop(state, start)
            return b""
        state.recent.add(start)
        state.position += len(data) - skip
        return data[skip:]
