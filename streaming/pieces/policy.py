"""Where an utterance's text is committed: at the pauses inside it, or only at its end.

With `pauses`, a pause of `commit_silence_ms` inside an utterance (shorter than the end
silence that closes it) commits everything before it. The pause is measured as the voice
detector measures the end silence, from where it places the speech's end: the FSMN places
it about 100 ms into a pause, so the default 100 ms commits at pauses of about 200 ms
(measured: docs/benchmarks.md, "Live text at pauses").
Once the open piece passes `max_piece_ms` it is cut where a pause has begun (shorter as yet
than the commit silence), else, in speech that runs on, at its quietest `quiet_window_ms`.
A piece cut in a pause is decoded with the pause heard so far after it (up to the commit
silence), and the next piece begins shortly before the speech after the pause: a model
handed a second of quiet ahead of speech may hear words in it. Each committed piece is
decoded once and its text never changes; the final is the committed pieces' text and the
last piece's (none, if the utterance ends in the pause a piece was cut at). The rule reads the
audio alone (the voice detector's verdicts and the samples, block by block), so a live
stream, a replay and an upload of the same audio are cut alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.types import SAMPLE_RATE

COMMIT_MODES = ("pauses", "off")


def ms_to_samples(ms: int) -> int:
    return ms * SAMPLE_RATE // 1000


@dataclass(frozen=True, slots=True)
class CommitPolicy:
    """How an utterance is cut into committed pieces (`mode` "off": it is not)."""

    mode: str = "off"
    commit_silence_ms: int = 100
    max_piece_ms: int = 6000
    # A piece shorter than this is not cut off: too little audio to decode on its own.
    min_piece_ms: int = 600
    quiet_window_ms: int = 100

    def __post_init__(self) -> None:
        if self.mode not in COMMIT_MODES:
            raise ValueError(f"commit mode must be one of {', '.join(COMMIT_MODES)}")
        if not 50 <= self.commit_silence_ms <= 5000:
            raise ValueError("commit_silence_ms must be within 50..5000")
        if not 0 < self.quiet_window_ms < self.min_piece_ms < self.max_piece_ms:
            raise ValueError("need 0 < quiet_window_ms < min_piece_ms < max_piece_ms")

    @property
    def on(self) -> bool:
        return self.mode == "pauses"

    @property
    def silence_samples(self) -> int:
        return ms_to_samples(self.commit_silence_ms)

    @property
    def min_samples(self) -> int:
        return ms_to_samples(self.min_piece_ms)

    @property
    def max_samples(self) -> int:
        return ms_to_samples(self.max_piece_ms)

    @property
    def window_samples(self) -> int:
        return ms_to_samples(self.quiet_window_ms)
