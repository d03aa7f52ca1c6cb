"""Where a stream's audio sits on AudioHook's timeline, across pauses and discarded audio.

AudioHook's `position` is the client's place in the call's audio: after a pause the client
reports (`resumed`: `start`, `discarded`) that the audio of the pause was dropped, and the
stream goes on at `start + discarded`; a `discarded` message says the same of audio the
client had to drop while streaming. Positions count that dropped audio, and transcript
offsets are positions. A pause's gap is filled with silence, up to `max_fill` samples at
a time, so the stream's own positions (what subscribers see) stay AudioHook's. Silence is
not free (the VAD runs on it, in one step of the event loop), so a longer gap fills
`max_fill` and skips the rest, and a `discarded` gap is skipped whole (Genesys' client
may report a discard and go on sending without a gap: inserting audio there would split
an utterance). From a skip on, stream positions trail AudioHook's by the skipped time,
and this timeline adds it back to every offset sent to the client. A gap before any
audio is skipped whole (a session's rate limit starts with its first audio, so a long
fill there would look like a burst).
"""

from __future__ import annotations

import bisect

from streaming.protocols.audiohook.messages import RATE


class Timeline:
    """A stream's samples (per channel, at 8 kHz) and the gaps skipped, by stream time."""

    def __init__(self, max_fill: int) -> None:
        self.max_fill = max_fill
        self.samples = 0  # on the stream: received and filled
        self.skipped = 0  # samples of AudioHook's timeline the stream does not hold
        self._at_ms: list[int] = []  # stream times from which each total skip applies
        self._total_ms: list[int] = []

    @property
    def position(self) -> int:
        """Where the stream's end is on AudioHook's timeline, in samples."""
        return self.samples + self.skipped

    def advance(self, samples: int) -> None:
        """Audio received: the stream and the timeline move on together."""
        self.samples += samples

    def close_gap(self, target: int, fill_ok: bool = True) -> int:
        """Move to `target` (an AudioHook position); the samples of silence to add for it
        (none unless `fill_ok`).

        Nothing when `target` is not ahead (a client's positions may lag ours by a frame).
        """
        gap = target - self.position
        if gap <= 0:
            return 0
        fill = min(gap, self.max_fill) if self.samples > 0 and fill_ok else 0
        self.samples += fill
        if gap > fill:
            self.skipped += gap - fill
            self._at_ms.append(self.samples * 1000 // RATE)
            self._total_ms.append(self.skipped * 1000 // RATE)
        return fill

    def position_ms(self, stream_ms: int) -> int:
        """A stream time (a final's start or end) as an AudioHook position, in ms."""
        i = bisect.bisect_right(self._at_ms, stream_ms)
        return stream_ms + (self._total_ms[i - 1] if i else 0)
