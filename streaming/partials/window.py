"""Settled partial text, so a partial re-decodes only the tail of a long utterance.

A whole-utterance partial costs a decode of everything said so far, so the work per
utterance grows with the square of its length, and a long partial in flight holds up
the finals queued behind it. Instead, once a partial has heard `hold_ms` of audio past
a token, that token is settled: later partials decode only from a little before the
settled text (`context_ms`, so the first fresh word is not cut) to the live edge, and
show the settled tokens followed by the fresh ones. The final still decodes the whole
utterance; this only bounds what partials cost.
"""

from __future__ import annotations

from itertools import takewhile

from engine.types import SAMPLE_RATE, Token, Transcript


def _ms_to_samples(ms: int) -> int:
    return ms * SAMPLE_RATE // 1000


class PartialWindow:
    """Per utterance: which audio the next partial decodes, and its text once answered."""

    def __init__(self, utt_start: int, hold_ms: int, context_ms: int) -> None:
        self._start = utt_start
        self._hold = _ms_to_samples(hold_ms)
        self._context = _ms_to_samples(context_ms)
        self._settled: list[Token] = []
        self._boundary = utt_start  # stream sample where the settled text ends

    @property
    def boundary(self) -> int:
        """Stream sample up to which the partial text is settled."""
        return self._boundary

    def window_start(self) -> int:
        """Stream sample where the next partial's audio begins."""
        if self._hold == 0:
            return self._start
        return max(self._start, self._boundary - self._context)

    def accept(self, begin: int, end: int, transcript: Transcript) -> str:
        """Fold in a decode of stream samples [begin, end); return the partial's text.

        Callers pass answers in order of `end` and drop older ones. A decode from the
        utterance's start replaces the settled text: it heard the most context.
        """
        if self._hold == 0:
            return transcript.text
        if begin <= self._start:
            self._settled = []
            self._boundary = self._start
        # Token times are on the decoded audio's clock; move them onto the stream's.
        fresh = [
            t for t in transcript.tokens if begin + _ms_to_samples(t.start_ms) >= self._boundary
        ]
        stitched = bool(self._settled) or len(fresh) < len(transcript.tokens)
        # Settled before this answer moves the boundary, so no token is shown twice.
        text = _join(self._settled + fresh) if stitched else transcript.text
        cut = end - self._hold
        if cut > self._boundary:
            ends = (begin + _ms_to_samples(t.end_ms) for t in fresh)
            settled = sum(1 for _ in takewhile(lambda e: e <= cut, ends))
            self._advance(begin, cut, fresh, settled)
        return text

    def _advance(self, begin: int, cut: int, fresh: list[Token], settled: int) -> None:
        # The new boundary goes midway into the gap after the last settled token, so a
        # token whose timing shifts a frame in the next decode still falls on one side.
        low = begin + _ms_to_samples(fresh[settled - 1].end_ms) if settled else self._boundary
        high = cut
        if settled < len(fresh):
            high = min(high, begin + _ms_to_samples(fresh[settled].start_ms))
        self._settled.extend(fresh[:settled])
        self._boundary = max(self._boundary, (low + high) // 2)


def _join(tokens: list[Token]) -> str:
    # Token texts carry their word-boundary spaces; runs collapse where two decodes meet.
    return " ".join("".join(t.text for t in tokens).split())
