"""A final's latency as a live client saw it: from sending the frame that completed the
audio up to one of its stream positions (`end_ms`, `decided_ms`) to its arrival."""

from __future__ import annotations

import math

from sensestream.client import Outcome

FRAME_MS = 100  # the live clients' frames


def completing_frame(ms: float, frame_ms: int = FRAME_MS) -> int:
    """The index of the frame whose sending completed the stream's audio up to `ms`."""
    return max(0, math.ceil(ms / frame_ms) - 1)


def latencies_ms(
    outcome: Outcome, field: str, *, frame_ms: int = FRAME_MS, spoken_only: bool = False
) -> list[float]:
    """Each final's latency from the frame that completed its audio up to `field` (finals
    without the field, or past the frames sent, are not counted; `spoken_only`: nor are
    finals without text)."""
    out = []
    for event, arrived in outcome.timed("final"):
        upto = event.get(field)
        if upto is None or (spoken_only and not event.get("text")):
            continue
        frame = completing_frame(upto, frame_ms)
        if frame < len(outcome.sent_at):
            out.append((arrived - outcome.sent_at[frame]) * 1000)
    return out
