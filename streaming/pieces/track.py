"""One utterance's pieces: cut, decoded, committed in order, and composed into its final."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from engine.types import Token, Transcript
from streaming.pieces.joining import Decoded, composed, separator


class CommittedPiece(NamedTuple):
    """A committed piece: its samples, the text to append (with its separator), and its
    tokens on the piece's clock (the first carrying that separator)."""

    start: int
    end: int
    text: str
    tokens: tuple[Token, ...] = ()


@dataclass(slots=True)
class _Piece:
    start: int
    end: int
    request_id: int | None  # None: nothing to decode (trailing silence)
    transcript: Transcript | None = None

    @property
    def done(self) -> bool:
        return self.transcript is not None or self.request_id is None


class PieceTrack:
    """The pieces of one utterance, from its first sample; the open one is not yet cut."""

    def __init__(self, utt_start: int) -> None:
        self.utt_start = utt_start
        self.open_start = utt_start  # where the open piece begins
        # Where the pause the open piece began in was placed, until speech resumes in it.
        self.paused_at: int | None = None
        self._committed: list[_Piece] = []
        self._last: _Piece | None = None  # the piece the utterance ended with
        self._closed = False
        self._announced = 0  # committed pieces whose text went out
        self.committed_text = ""  # what those pieces say, joined
        self.failure: tuple[str, str] | None = None  # (code, message) of a failed decode

    @property
    def closed(self) -> bool:
        return self._closed

    def cut(self, end: int, request_id: int, pause: int | None) -> None:
        """Commit the open piece up to `end`; its decode is `request_id`. `pause`: where
        the voice detector placed the start of the pause `end` lies in (None: `end` is
        inside speech); the next piece then begins once speech resumes (`resume`)."""
        self._committed.append(_Piece(self.open_start, end, request_id))
        self.open_start = end
        self.paused_at = pause

    def resume(self, start: int) -> None:
        """Speech resumed in the pause the open piece began at: it begins at `start`
        (never before the cut), so the pause's silence is no part of its decode."""
        self.open_start = max(self.open_start, start)
        self.paused_at = None

    def close(self, end: int, request_id: int | None) -> None:
        """The utterance ended at `end`: its last piece is decoded by `request_id` (None: it
        holds too little audio to decode)."""
        if request_id is not None:
            self._last = _Piece(self.open_start, end, request_id)
        self.open_start = end
        self._closed = True

    def _pieces(self) -> list[_Piece]:
        return self._committed + ([self._last] if self._last is not None else [])

    def request_ids(self) -> list[int]:
        """The decodes that make up the final, in order."""
        return [p.request_id for p in self._pieces() if p.request_id is not None]

    def owns(self, request_id: int) -> bool:
        return any(p.request_id == request_id for p in self._pieces())

    def answer(self, request_id: int, transcript: Transcript) -> None:
        for piece in self._pieces():
            if piece.request_id == request_id:
                piece.transcript = transcript

    def fail(self, request_id: int, code: str, message: str) -> None:
        """A piece could not be decoded: the utterance fails (the first failure says why)."""
        if self.owns(request_id) and self.failure is None:
            self.failure = (code, message)

    def commits(self) -> list[CommittedPiece]:
        """The committed pieces decoded since the last call, in order. None of the last
        piece: it is the final's."""
        out = []
        while self._announced < len(self._committed) and self.failure is None:
            piece = self._committed[self._announced]
            if piece.transcript is None:
                break
            text = piece.transcript.text
            delta = separator(self.committed_text, text) + text
            self.committed_text += delta
            self._announced += 1
            if delta:
                out.append(
                    CommittedPiece(piece.start, piece.end, delta, _led(piece.transcript, delta))
                )
        return out

    @property
    def complete(self) -> bool:
        """Closed, with every piece decoded: the final can be composed."""
        return self._closed and all(p.done for p in self._pieces())

    def transcript(self, itn: bool) -> Transcript:
        """The final's transcript (once `complete`)."""
        decoded = [
            Decoded(p.start, p.end, p.transcript)
            for p in self._pieces()
            if p.transcript is not None
        ]
        return composed(decoded, self.utt_start, itn)


def _led(transcript: Transcript, delta: str) -> tuple[Token, ...]:
    """The piece's tokens with the first one led by the delta's separator, as it is joined."""
    tokens = transcript.tokens
    if not tokens:
        return ()
    lead = delta[: len(delta) - len(transcript.text)]
    return (replace(tokens[0], text=lead + tokens[0].text.lstrip(" ")), *tokens[1:])
