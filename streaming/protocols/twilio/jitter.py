"""A call's tracks placed by their timestamps: gaps become silence, late chunks are dropped.

Twilio stamps each media chunk with milliseconds since the stream started, one clock for
every track. A chunk stamped t belongs at sample t * rate / 1000 of its track; this keeps
each track's next sample (its position) and emits audio only in order:

- A chunk that starts at the position goes out at once: in-order audio is never held.
- A chunk that starts after it waits while a hole lies before it, for the chunk that
  fills the hole (frames shuffled by a few places). Once `hold_ms` (200 ms) of the track's
  own audio has come past the hole, the hole is lost: it becomes silence and the chunks
  after it go out (so too once a track holds `max_pending` chunks). Each track waits on
  its own audio alone, so a track that runs behind the other keeps every chunk, and one
  chunk stamped ahead does not give up the hole before it.
- A track more than `max_lag_ms` (3 s) behind the newest audio of any track (it stopped
  sending) is filled with silence up to that lag, so both channels stay on the call's
  clock; a track that sends again carries on at its place.
- A chunk wholly before the position is dropped: a duplicate when a chunk with its
  timestamp was already taken, late otherwise. One that only overlaps it loses the
  overlapping head (its audio is already placed).
- A timestamp out of range is not trusted: one starting more than `max_ahead_ms` (1 s)
  past the newest audio of any track, or ending more than that before its own track's
  position. Its chunk is placed as an unstamped one is, right after its track's audio,
  and counted (`misplaced`), so one bad timestamp moves no other chunk. Only when
  `rebase_after` (3) out-of-range chunks in a row agree on a new clock (a step or a reset
  of the stream's clock, forward or back) is the clock rebased, every track alike, so
  that the chunks carry on where the tracks are (`clock_jumps`): no silence is put in for
  a step, and nothing is dropped after a reset.

So at once a track gets at most `max_lag_ms` + `max_ahead_ms` of silence (4 s), within the
live rate limit's default 5 s burst, however the timestamps jump.
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
    max_lag_ms: int = 3000  # how far a track may run behind before it is filled
    max_ahead_ms: int = 1000  # how far a timestamp may jump before it is doubted
    rebase_after: int = 3  # out-of-range chunks in a row that agree on a new clock
    max_pending: int = 64  # chunks held per track, whatever their timestamps
    remembered: int = 512  # recent timestamps per track, to tell duplicates from late

    def __post_init__(self) -> None:
        if self.rate <= 0 or min(self.hold_ms, self.max_lag_ms, self.max_ahead_ms) < 0:
            raise ValueError("the rate must be positive and the bounds not negative")
        if self.rebase_after < 1 or self.max_pending < 1 or self.remembered < 1:
            raise ValueError("rebase_after, max_pending and remembered must be at least 1")

    def samples(self, ms: int) -> int:
        return ms * self.rate // 1000


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
    clock_jumps: int = 0  # steps or resets of the clock taken (the clock rebased)
    misplaced: int = 0  # chunks whose timestamp was out of range, placed as unstamped


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
        self.held = 0  # samples in `pending`
        self.newest = 0  # the furthest end of any chunk taken on this track
        self.recent = _Recent(remembered)

    @property
    def following(self) -> int:
        """Where a chunk without a (trusted) timestamp goes: after the track's audio."""
        return max(self.newest, self.position)


class _Step:
    """Out-of-range chunks in a row that agree on a new clock offset."""

    def __init__(self) -> None:
        self.count = 0
        self.first = 0  # the first chunk's offset: the others must agree with it
        self.offset = 0  # the leading track's offset among them


class Timeline:
    """Places the chunks of N tracks on the stream's clock (see the module's docstring)."""

    def __init__(self, tracks: int, config: JitterConfig | None = None) -> None:
        self._config = config or JitterConfig()
        self._tracks = [_Track(self._config.remembered) for _ in range(tracks)]
        self._horizon = 0  # the end of the newest audio on any track
        self._offset = 0  # samples subtracted from every timestamp since a clock step
        self._step = _Step()
        self._duplicates = 0
        self._late = 0
        self._silence = 0
        self._jumps = 0
        self._misplaced = 0

    @property
    def stats(self) -> JitterStats:
        return JitterStats(
            self._duplicates, self._late, self._silence, self._jumps, self._misplaced
        )

    def push(self, track: int, timestamp_ms: int | None, data: bytes) -> list[Placed]:
        """Take one chunk (None: no timestamp, so right after the track's audio)."""
        if not data:
            return []
        state = self._tracks[track]
        start = self._start(state, timestamp_ms, len(data))
        end = start + len(data)
        if end <= state.position or start in state.pending:
            self._drop(state, start)
            return []
        state.pending[start] = data
        state.held += len(data)
        state.newest = max(state.newest, end)
        self._horizon = max(self._horizon, end)
        return self._release(self._horizon - self._config.samples(self._config.max_lag_ms))

    def flush(self) -> list[Placed]:
        """The end of the stream: every hole is silence, every track runs to the newest end."""
        return self._release(self._horizon)

    # ---- where a chunk goes -------------------------------------------------------------

    def _start(self, state: _Track, timestamp_ms: int | None, size: int) -> int:
        """The chunk's start: its timestamp's place if in range, else after its track's audio."""
        if timestamp_ms is None:
            return state.following
        stamped = self._config.samples(timestamp_ms)
        start = stamped - self._offset
        bound = self._config.samples(self._config.max_ahead_ms)
        if start <= self._horizon + bound and start + size >= state.position - bound:
            self._step.count = 0  # a trusted timestamp: the clock has not stepped
            return start
        if self._stepped(stamped - self._horizon):
            return stamped - self._offset
        self._misplaced += 1
        return state.following

    def _stepped(self, offset: int) -> bool:
        """Whether this out-of-range chunk is the last of enough in a row that agree."""
        step = self._step
        # The tracks run apart by up to the lag, so offsets that close agree; the largest
        # is the leading track's, the one that puts every track where it is.
        tolerance = self._config.samples(self._config.max_lag_ms)
        if step.count and abs(offset - step.first) <= tolerance:
            step.count += 1
            step.offset = max(step.offset, offset)
        else:
            step.count, step.first, step.offset = 1, offset, offset
        if step.count < self._config.rebase_after:
            return False
        step.count = 0
        self._offset = step.offset
        self._jumps += 1
        return True

    def _drop(self, state: _Track, start: int) -> None:
        if start in state.recent or start in state.pending:
            self._duplicates += 1
        else:
            self._late += 1

    # ---- what goes out ------------------------------------------------------------------

    def _release(self, fill_to: int) -> list[Placed]:
        out: list[Placed] = []
        for index, state in enumerate(self._tracks):
            pieces = self._release_track(state, fill_to)
            if pieces:
                out.append(Placed(index, b"".join(pieces)))
        return out

    def _release_track(self, state: _Track, fill_to: int) -> list[bytes]:
        """Emit what is in order; a hole is silence once it is lost or behind `fill_to`."""
        pieces: list[bytes] = []
        hold = self._config.samples(self._config.hold_ms)
        while True:
            if state.pending:
                start = min(state.pending)
                if start <= state.position:
                    pieces.append(self._take(state, start))
                    continue
                lost = state.held >= hold or len(state.pending) > self._config.max_pending
                target = start if lost else min(start, fill_to)
            else:
                target = fill_to
            if target <= state.position:
                return [p for p in pieces if p]
            gap = target - state.position
            pieces.append(bytes([MULAW_SILENCE]) * gap)
            self._silence += gap
            state.position = target

    def _take(self, state: _Track, start: int) -> bytes:
        """The held chunk at `start` (at or before the position), less what is placed."""
        data = state.pending.pop(start)
        state.held -= len(data)
        skip = state.position - start
        if skip >= len(data):
            self._drop(state, start)
            return b""
        state.recent.add(start)
        state.position += len(data) - skip
        return data[skip:]
