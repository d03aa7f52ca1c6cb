"""A session handed over to another worker (`Session.hand_over`): the finals decided go
out, and an utterance still open is dropped unfinished, so that the next worker, hearing
the audio again from the last final's end, decodes it whole and numbers it as it was."""

from __future__ import annotations

from engine.types import InferenceRequest
from streaming.audio.decoder import AudioFormat
from streaming.commands import Audio, Configure
from streaming.events import Ended, Final, Partial, SessionEvent
from streaming.pieces.policy import CommitPolicy
from streaming.segmenter import SegmenterConfig
from streaming.session import SETTLE_LEAD_MS, SETTLE_MS, Session, SessionConfig
from tests.speech import to_s16le
from tests.streaming.fakes import EnergyVadModel, answer, tone_bursts

SR = 16000
# Two utterances: 0.5-1.5 s, then 2.5-5.0 s (its end silence runs out at 5.5 s).
SPANS = [(0.5, 1.5), (2.5, 5.0)]


def session(commits: CommitPolicy | None = None) -> Session:
    config = SessionConfig(
        segmenter=SegmenterConfig(preroll_ms=0), commits=commits or CommitPolicy()
    )
    s = Session("s", config, EnergyVadModel())
    s.handle(Configure(AudioFormat()), 0.0)
    return s


def feed(
    s: Session,
    until_s: float,
    answered: bool = True,
    spans: list[tuple[float, float]] = SPANS,
) -> list[InferenceRequest]:
    """The bursts up to `until_s` in 100 ms frames; every decode answered at once unless
    not `answered`. The requests made."""
    audio = to_s16le(tone_bursts(spans, 6.5))
    made: list[InferenceRequest] = []
    for start in range(0, int(until_s * SR), 1600):
        s.handle(Audio(audio[2 * start : 2 * (start + 1600)]), start / SR)
        requests = s.requests_to_submit()
        made += requests
        for r in requests if answered else ():
            s.receive_result(answer(r), start / SR)
    return made


def outcome(s: Session) -> list[SessionEvent]:
    for r in s.requests_to_submit():
        s.receive_result(answer(r), 9.0)
    return s.events_to_send()


def test_a_hand_over_mid_speech_drops_the_open_utterance_unfinished() -> None:
    s = session()
    feed(s, 4.0)  # the second utterance is open
    # A new VAD must hear it whole, and enough of the pause before it to find its start.
    assert s.settled_ms == 2500 - SETTLE_LEAD_MS
    s.events_to_send()
    s.hand_over(4.0)
    events = outcome(s)
    assert not [e for e in events if isinstance(e, Final)]  # the first's went out before
    assert isinstance(events[-1], Ended) and s.finished
    assert s.dropped_utt == 1


def test_answers_for_a_dropped_utterance_are_ignored() -> None:
    s = session()
    late = feed(s, 4.0, answered=False)
    s.hand_over(4.0)
    for r in late:  # the first's final and the second's partials, answered after
        s.receive_result(answer(r), 4.5)
    events = s.events_to_send()
    assert [e.utt_id for e in events if isinstance(e, Final)] == [0]
    assert not [e for e in events if isinstance(e, Partial) and e.utt_id == 1]
    assert isinstance(events[-1], Ended) and s.dropped_utt == 1


def test_a_hand_over_in_a_pause_drops_nothing() -> None:
    s = session()
    feed(s, 2.3)  # the first utterance ended at 1.5 s and its end silence ran out
    assert s.in_pause
    assert s.settled_ms == s.judged_ms - SETTLE_MS
    s.hand_over(2.3)
    events = outcome(s)
    assert isinstance(events[-1], Ended) and s.dropped_utt is None


def test_an_utterance_with_committed_text_ends_here_as_a_final() -> None:
    # Its committed pieces were promised to the client: heard again elsewhere, they
    # would be said twice.
    s = session(CommitPolicy("pauses", commit_silence_ms=250, min_piece_ms=500))
    feed(s, 4.5, spans=[(0.5, 1.5), (2.5, 3.2), (3.6, 5.0)])  # a 0.4 s pause inside
    s.events_to_send()
    s.hand_over(4.5)
    events = outcome(s)
    assert [e.utt_id for e in events if isinstance(e, Final)] == [1]
    assert s.dropped_utt is None
