"""Diarization in the session: finals labelled with who spoke, in stream order, whatever
order the engine answers in; pieces of one utterance may be different speakers.

The audio is tone bursts, each said by one of two voices; the fake engine names the bursts
a decode holds and, when asked, embeds the voice of the burst it holds most of.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.types import InferenceRequest, InferenceResult, RequestKind, Token, Transcript
from streaming.audio.decoder import AudioFormat
from streaming.commands import Configure, StreamOptions
from streaming.events import Final, SessionEvent, SpeakerTurn
from streaming.pieces.policy import CommitPolicy
from streaming.redaction.policies import Policy, Redaction
from streaming.segmenter import SegmenterConfig
from streaming.session import Session, SessionConfig
from streaming.speakers.online import SpeakerPolicy
from streaming.vad.types import VadConfig
from tests.streaming.fakes import EnergyVadModel
from tests.streaming.test_session_commits import run as run_commits
from tests.streaming.test_session_commits import spied

SR = 16000
A, B = np.eye(256, dtype=np.float32)[:2]
# Three utterances (1.5 s apart): A, then B, then A again.
TURNS = [((0.3, 1.5), A), ((3.0, 4.2), B), ((5.7, 6.9), A)]
# One utterance, its speakers changing at its 300 ms pauses: A, B, B.
CHANGING = [((0.3, 1.5), A), ((1.8, 3.0), B), ((3.3, 4.5), B)]


def decoder(
    turns: list[tuple[tuple[float, float], np.ndarray]],
) -> Callable[[InferenceRequest], InferenceResult]:
    def answer(request: InferenceRequest) -> InferenceResult:
        begin = request.start_sample / SR
        end = begin + request.num_samples / SR
        held = [(min(b, end) - max(a, begin), k) for k, ((a, b), _) in enumerate(turns)]
        tokens = [
            Token(k, f" b{k}", 0, 100)
            for k, ((a, b), _) in enumerate(turns)
            if begin <= (a + b) / 2 < end
        ]
        text = "".join(t.text for t in tokens).strip()
        transcript = Transcript(text, "en", "neutral", "speech", True, text, tuple(tokens))
        most, k = max(held)
        voice = turns[k][1] if request.options.speaker and most > 0 else None
        return InferenceResult(request.ref, transcript, speaker=voice)

    return answer


OFF = CommitPolicy()
NOTHING = Redaction()


def session(
    diarize: bool | None, commits: CommitPolicy = OFF, redaction: Redaction = NOTHING
) -> Session:
    config = SessionConfig(
        vad=VadConfig(end_silence_ms=500),
        segmenter=SegmenterConfig(preroll_ms=0),
        commits=commits,
        speakers=SpeakerPolicy(min_new_s=0.3),
        redaction=redaction,
    )
    s = Session("s", config, EnergyVadModel())
    s.handle(Configure(AudioFormat(), StreamOptions(diarize=diarize)), 0.0)
    return s


def run(
    s: Session,
    turns: list[tuple[tuple[float, float], np.ndarray]],
    total_s: float,
    rng: random.Random | None = None,
) -> tuple[list[SessionEvent], list[InferenceRequest]]:
    """The audio at real pace; each request answered 0.2 s later (or after a random delay
    up to 1.5 s, shuffled, with `rng`); then stop. The events, and every request."""
    asked = spied(s)
    spans = [span for span, _ in turns]
    delay = 0.2 if rng is None else 1.5
    timed = run_commits(s, 3200, delay, rng, spans, total_s, decoder(turns))
    return [e for _, e in timed], asked


def finals(events: list[SessionEvent]) -> list[Final]:
    return [e for e in events if isinstance(e, Final)]


def test_without_diarization_no_decode_asks_who_spoke_and_finals_name_nobody() -> None:
    events, asked = run(session(diarize=None), TURNS, 8.5)
    assert [f.transcript.text for f in finals(events)] == ["b0", "b1", "b2"]
    assert not any(r.options.speaker for r in asked)
    assert all(f.speaker is None and f.speaker_turns == () for f in finals(events))


def test_each_final_names_its_speaker_in_order_of_first_appearance() -> None:
    events, asked = run(session(diarize=True), TURNS, 8.5)
    got = finals(events)
    assert [f.speaker for f in got] == ["S1", "S2", "S1"]
    assert got[1].speaker_turns == (SpeakerTurn("S2", got[1].start_ms, got[1].end_ms),)
    # Partials never ask who spoke; every decode a final is made of does.
    assert {r.options.speaker for r in asked if r.kind is RequestKind.PARTIAL} == {False}
    assert all(r.options.speaker for r in asked if r.kind is not RequestKind.PARTIAL)


def test_with_commits_a_change_of_speaker_at_a_pause_splits_the_final_into_turns() -> None:
    events, _ = run(session(diarize=True, commits=CommitPolicy("pauses")), CHANGING, 5.5)
    (final,) = finals(events)
    assert final.transcript.text == "b0 b1 b2"
    assert [t.speaker for t in final.speaker_turns] == ["S1", "S2"]
    assert final.speaker == "S2"  # who spoke longest
    first, second = final.speaker_turns
    assert final.start_ms == first.start_ms and second.end_ms == final.end_ms
    # The change is in the pause between 1.5 s and 1.8 s.
    assert 1500 <= first.end_ms <= second.start_ms <= 1800


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_labels_do_not_depend_on_the_order_the_engine_answers_in(seed: int) -> None:
    events, _ = run(session(diarize=True), TURNS, 8.5, random.Random(seed))
    assert [f.speaker for f in finals(events)] == ["S1", "S2", "S1"]


def test_a_final_scores_how_like_its_speaker_it_was() -> None:
    near_a = (A + 0.5 * B) / np.linalg.norm(A + 0.5 * B)  # cosine 0.894 to A, 0.447 to B
    turns = [*TURNS[:2], (TURNS[2][0], near_a)]
    events, _ = run(session(diarize=True), turns, 8.5)
    got = finals(events)
    assert [f.speaker for f in got] == ["S1", "S2", "S1"]
    # S1 and S2 open with their first final (1.0); the third is A's voice, but not exactly.
    scores = [f.speaker_score for f in got]
    assert scores[:2] == [1.0, 1.0] and scores[2] == pytest.approx(1 / np.sqrt(1.25), abs=1e-5)


def test_redacted_finals_still_name_their_speakers() -> None:
    redaction = Redaction(frozenset({Policy.NUMBERS}))
    events, _ = run(session(diarize=True, redaction=redaction), TURNS, 8.5)
    assert [f.speaker for f in finals(events)] == ["S1", "S2", "S1"]


def test_a_voice_that_could_not_be_embedded_labels_nothing() -> None:
    odd = np.full(256, np.nan, np.float32)
    turns = [TURNS[0], (TURNS[1][0], odd), TURNS[2]]
    events, _ = run(session(diarize=True), turns, 8.5)
    assert [f.speaker for f in finals(events)] == ["S1", None, "S1"]
