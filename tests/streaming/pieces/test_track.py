"""One utterance's pieces: committed in order, once; the last one is the final's."""

from __future__ import annotations

from dataclasses import replace

from engine.types import Token, Transcript
from streaming.pieces.track import PieceTrack


def said(text: str) -> Transcript:
    return Transcript(text, "en", "neutral", "speech", True, text)


def test_pieces_commit_in_order_whatever_order_their_decodes_come_in() -> None:
    track = PieceTrack(0)
    track.cut(8000, request_id=1, pause=None)
    track.cut(16000, request_id=2, pause=None)
    track.answer(2, said("how are you?"))
    assert track.commits() == []  # the first is not back: nothing may go before it
    track.answer(1, said("Hello,"))
    assert [c[:3] for c in track.commits()] == [(0, 8000, "Hello,"), (8000, 16000, " how are you?")]
    assert track.commits() == [] and track.committed_text == "Hello, how are you?"


def test_the_final_is_the_committed_text_then_the_last_piece() -> None:
    track = PieceTrack(0)
    track.cut(8000, 1, pause=None)
    track.answer(1, said("Hello,"))
    track.close(20000, 2)
    assert not track.complete
    track.answer(2, said("fine."))
    assert [c[:3] for c in track.commits()] == [(0, 8000, "Hello,")]  # not the last piece
    assert track.complete and track.transcript(True).text == "Hello, fine."


def test_a_last_piece_too_short_to_decode_leaves_the_committed_text() -> None:
    track = PieceTrack(0)
    track.cut(8000, 1, pause=None)
    track.close(8500, None)
    assert not track.complete
    track.answer(1, said("Thanks."))
    assert track.complete and track.transcript(True).text == "Thanks."


def test_a_failed_piece_fails_the_utterance_and_commits_nothing_more() -> None:
    track = PieceTrack(0)
    track.cut(8000, 1, pause=None)
    track.fail(1, "out_of_memory", "no")
    assert track.failure == ("out_of_memory", "no") and track.commits() == []
    track.fail(99, "other", "not this track's")
    assert track.failure == ("out_of_memory", "no")


def test_a_piece_cut_at_a_pause_begins_where_speech_resumes_never_before_the_cut() -> None:
    track = PieceTrack(0)
    track.cut(8000, 1, pause=8000)
    assert track.paused_at == 8000 and track.open_start == 8000
    track.resume(20000)
    assert track.open_start == 20000 and track.paused_at is None
    track.cut(30000, 2, pause=29000)
    track.resume(25000)  # a resumption placed before the cut moves nothing back
    assert track.open_start == 30000
    track.cut(40000, 3, pause=None)  # a cut inside speech: no pause to skip
    assert track.paused_at is None


def test_a_commit_carries_its_tokens_led_by_the_space_it_is_joined_with() -> None:
    track = PieceTrack(0)
    track.cut(8000, request_id=1, pause=None)
    track.cut(16000, request_id=2, pause=None)
    first = (Token(5, " Hello", 0, 300, logprob=-0.1), Token(6, ",", 300, 360, logprob=-0.7))
    second = (Token(7, "how", 0, 200, logprob=-0.2), Token(8, " are", 200, 400))
    track.answer(1, replace(said("Hello,"), tokens=first))
    track.answer(2, replace(said("how are"), tokens=second))
    one, two = track.commits()
    assert "".join(t.text for t in one.tokens) == one.text == "Hello,"
    assert "".join(t.text for t in two.tokens) == two.text == " how are"
    assert [t.logprob for t in (*one.tokens, *two.tokens)] == [-0.1, -0.7, -0.2, None]
