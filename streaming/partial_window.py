"""Settled partial text: a promise that captions keep, and a bound on what partials cost.

A whole-utterance partial costs a decode of everything said so far, so the work per
utterance grows with the square of its length, and a long partial in flight holds up
the finals queued behind it. Instead, once a partial has heard `hold_ms` of audio past
a token, that token is settled: later partials decode only from a little before the
settled text (`context_ms`, so the first fresh word is not cut) to the live edge, and
show the settled tokens followed by the fresh ones.

Settled text is what clients are told is stable (v1's `stable_chars`, OpenAI's deltas,
FunASR's online increments), so it is never taken back: no later decode replaces it, not
even one from the utterance's start, and the final is composed the same way (`compose`:
the settled tokens, then the final decode's past the boundary). Without a hold nothing
settles before the final.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import takewhile

from engine.types import SAMPLE_RATE, Token, Transcript


def _ms_to_samples(ms: int) -> int:
    return ms * SAMPLE_RATE // 1000


def _samples_to_ms(samples: int) -> int:
    return samples * 1000 // SAMPLE_RATE


def _shifted(token: Token, ms: int) -> Token:
    return replace(token, start_ms=token.start_ms + ms, end_ms=token.end_ms + ms)


class PartialWindow:
    """Per utterance: which audio the next partial decodes, and its text once answered."""

    def __init__(self, utt_start: int, hold_ms: int, context_ms: int) -> None:
        self._start = utt_start
        self._hold = _ms_to_samples(hold_ms)
        self._context = _ms_to_samples(context_ms)
        self._settled: list[Token] = []  # on the utterance's clock
        self._boundary = utt_start  # stream sample where the settled text ends

    @property
    def boundary(self) -> int:
        """Stream sample up to which the partial text is settled."""
        return self._boundary

    @property
    def settled_text(self) -> str:
        """The text promised so far: every partial's and the final's text starts with it."""
        return _join(self._settled)

    def window_start(self) -> int:
        """Stream sample where the next partial's audio begins."""
        if self._hold == 0:
            return self._start
        return max(self._start, self._boundary - self._context)

    def accept(self, begin: int, end: int, transcript: Transcript) -> str:
        """Fold in a decode of stream samples [begin, end); return the partial's text.

        Callers pass answers in order of `end` and drop older ones. Settled text stays,
        even under a decode from the utterance's start: it has been promised.
        """
        if self._hold == 0:
            return transcript.text
        fresh = self._fresh(begin, transcript)
        # Settled before this answer moves the boundary, so no token is shown twice.
        text = _join(self._settled + fresh)
        cut = end - self._hold
        if cut > self._boundary:
            ends = (begin + _ms_to_samples(t.end_ms) for t in fresh)
            settled = sum(1 for _ in takewhile(lambda e: e <= cut, ends))
            self._advance(begin, cut, fresh, settled)
        return text

    def compose(self, begin: int, transcript: Transcript) -> Transcript:
        """The final's transcript from its decode of stream samples from `begin`: the
        settled tokens, then the decode's tokens past the boundary (as is, when nothing
        settled)."""
        if not self._settled:
            return transcript
        onto_final = _samples_to_ms(self._start - begin)
        tokens = [_shifted(t, onto_final) for t in self._settled]
        tokens += self._fresh(begin, transcript)
        text = _join(tokens)
        rich = transcript.rich_text
        if transcript.text and transcript.text in rich:
            rich = rich.replace(transcript.text, text, 1)  # its tags' marks stay around it
        return replace(transcript, text=text, tokens=tuple(tokens), rich_text=rich)

    def _fresh(self, begin: int, transcript: Transcript) -> list[Token]:
        """The decode's tokens that start past the boundary (their times are on the
        decoded audio's clock, which starts at stream sample `begin`)."""
        return [
            t for t in transcript.tokens if begin + _ms_to_samples(t.start_ms) >= self._boundary
        ]

    def _advance(self, begin: int, cut: int, fresh: list[Token], settled: int) -> None:
        # The new boundary goes midway into the gap after the last settled token, so a
        # token whose timing shifts a frame in the next decode still falls on one side.
        low = begin + _ms_to_samples(fresh[settled - 1].end_ms) if settled else self._boundary
        high = cut
        if settled < len(fresh):
            high = min(high, begin + _ms_to_samples(fresh[settled].start_ms))
        onto_utterance = _samples_to_ms(begin - self._start)
        self._settled.extend(_shifted(t, onto_utterance) for t in fresh[:settled])
        self._boundary = max(self._boundary, (low + high) // 2)


def _join(tokens: list[Token]) -> str:
    # Token texts carry their word-boundary spaces; runs collapse where two decodes meet.
    return " ".join("".join(t.text for t in tokens).split())
