"""Where an utterance's text is committed: at the pauses inside it, or only at its end.

With `pauses`, a pause of `commit_silence_ms` inside an utterance (shorter than the end
silence that closes it) commits everything before it. The pause is measured as the voice
detector measures the end silence, from where it places the speech's end: the FSMN places
it about 100 ms into a pause, so the default 150 ms commits at pauses of about 250 ms.
Speech that runs on without such a pause is cut at its quietest `quiet_window_ms` once the
open piece passes `max_piece_ms`. Each committed piece is decoded once and its text never
changes; the final is the committed pieces' text and the last piece's. The rule reads the
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
    commit_silence_ms: int = 150
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
