"""Text committed at the pauses inside an utterance: promised during speech, never withdrawn.

The audio is tone bursts (one "word" each) with short pauses inside utterances and long
ones between them; the fake decoder names each burst whose middle lies in the audio it is
given, so a piece's text is exactly its bursts and the final is the utterance's bursts.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.types import InferenceRequest, InferenceResult, RequestKind, Token, Transcript
from streaming.audio.decoder import AudioFormat
from streaming.commands import Audio, Configure, Stop
from streaming.events import Committed, Final, Partial, SessionEvent
from streaming.pieces.policy import CommitPolicy
from streaming.segmenter import SegmenterConfig
from streaming.session import Session, SessionConfig
from streaming.vad.types import VadConfig
from tests.speech import chunks, to_s16le
from tests.streaming.fakes import EnergyVadModel, tone_bursts

SR = 16000
# Two utterances: three words with 300 ms pauses (shorter than the 500 ms end silence),
# then, after a long pause, two more.
SPANS = [(0.3, 1.0), (1.3, 2.0), (2.3, 3.0), (4.5, 5.2), (5.5, 6.2)]
TOTAL_S = 7.5
PAUSES = CommitPolicy("pauses", commit_silence_ms=250, min_piece_ms=500, max_piece_ms=4000)


def burst_decoder(spans: list[tuple[float, float]]) -> Callable[[InferenceRequest], Transcript]:
    def decode(request: InferenceRequest) -> Transcript:
        begin = request.start_sample / SR
        end = begin + request.num_samples / SR
        tokens = []
        for k, (a, b) in enumerate(spans):
            if begin <= (a + b) / 2 < end:
                start_ms, end_ms = round((a - begin) * 1000), round((b - begin) * 1000)
                tokens.append(Token(k, f" b{k}", max(0, start_ms), end_ms))
        text = "".join(t.text for t in tokens).strip()
        return Transcript(text, "en", "neutral", "speech", True, text, tuple(tokens))

    return decode


def session(commits: CommitPolicy = PAUSES, end_silence_ms: int = 500) -> Session:
    config = SessionConfig(
        vad=VadConfig(end_silence_ms=end_silence_ms),
        segmenter=SegmenterConfig(preroll_ms=0),
        commits=commits,
    )
    s = Session("s", config, EnergyVadModel())
    s.handle(Configure(AudioFormat()), 0.0)
    return s


def run(
    s: Session,
    frame_bytes: int = 3200,
    delay_s: float = 0.2,
    rng: random.Random | None = None,
    spans: list[tuple[float, float]] = SPANS,
    total_s: float = TOTAL_S,
    answer: Callable[[InferenceRequest], InferenceResult] | None = None,
) -> list[tuple[float, SessionEvent]]:
    """The audio at the pace of speech; each decode answered `delay_s` later (random
    delays up to it, so out of order, with `rng`) by `answer` (default: the bursts it
    holds, named); then stop. Events with their times."""
    decode = burst_decoder(spans)
    respond = answer or (lambda r: InferenceResult(r.ref, decode(r)))
    waiting: list[tuple[float, InferenceRequest]] = []
    out: list[tuple[float, SessionEvent]] = []

    def step(now: float) -> None:
        for r in s.requests_to_submit():
            wait = delay_s if rng is None else rng.uniform(0.0, delay_s)
            waiting.append((now + wait, r))
        due = [w for w in waiting if w[0] <= now]
        waiting[:] = [w for w in waiting if w[0] > now]
        if rng is not None:
            rng.shuffle(due)
        for _, r in due:
            s.receive_result(respond(r), now)
        out.extend((now, e) for e in s.events_to_send())

    audio = to_s16le(tone_bursts(spans, total_s))
    now = 0.0
    for piece in chunks(audio, frame_bytes):
        now += len(piece) / (2 * SR)
        s.handle(Audio(piece), now)
        step(now)
    s.handle(Stop(), now)
    step(now)
    while waiting:
        now += 0.05
        step(now)
    return out


def finals(events: list[tuple[float, SessionEvent]]) -> dict[int, str]:
    return {e.utt_id: e.transcript.text for _, e in events if isinstance(e, Final)}


def test_text_is_committed_at_each_pause_and_the_final_is_the_committed_text_and_the_rest() -> None:
    events = run(session())
    assert finals(events) == {0: "b0 b1 b2", 1: "b3 b4"}
    committed = [(e.utt_id, e.text) for _, e in events if isinstance(e, Committed)]
    assert committed == [(0, "b0"), (0, " b1"), (0, " b2"), (1, "b3"), (1, " b4")]
    # Each word is committed in the pause after it: its end, the commit silence (250 ms)
    # rounded up to a 100 ms block, and the decode (200 ms); long before the utterance ends.
    when = {e.text.strip(): t for t, e in events if isinstance(e, Committed)}
    for word, end_s in (("b0", 1.0), ("b1", 2.0), ("b3", 5.2)):
        assert when[word] <= end_s + 0.3 + 0.2 + 0.1  # and a frame's rounding


def test_committed_text_goes_out_before_the_final_and_partials_promise_it() -> None:
    events = run(session())
    final_at = {e.utt_id: t for t, e in events if isinstance(e, Final)}
    for t, e in events:
        if isinstance(e, Committed):
            assert t <= final_at[e.utt_id]
    shown = [e for _, e in events if isinstance(e, Partial)]
    assert any(p.stable_chars > 0 for p in shown)
    text = finals(events)
    for p in shown:
        assert text[p.utt_id].startswith(p.text[: p.stable_chars])


def spied(s: Session) -> list[InferenceRequest]:
    """Every request the session hands out from now on, in order."""
    requests: list[InferenceRequest] = []
    real = s.requests_to_submit

    def spy() -> list[InferenceRequest]:
        got = real()
        requests.extend(got)
        return got

    s.requests_to_submit = spy  # type: ignore[method-assign]
    return requests


def test_the_final_comes_with_the_last_pause_not_a_decode_of_the_whole_utterance() -> None:
    s = session()
    requests = spied(s)
    run(s)
    decoded = [r for r in requests if r.kind is not RequestKind.PARTIAL]
    # Each word's audio is decoded once for the final, alone: every decode holds one
    # word whole, and no word is in two (a decode may share some of a pause's silence
    # with the next: it is decoded with the pause it was cut at).
    spans = [(r.start_sample / SR, (r.start_sample + r.num_samples) / SR) for r in decoded]
    holding = [[k for k, (a, b) in enumerate(SPANS) if s <= a and b <= e] for s, e in spans]
    assert sorted(holding) == [[k] for k in range(len(SPANS))]


def test_a_piece_after_a_long_pause_is_decoded_from_where_speech_resumed() -> None:
    # One utterance (2 s end silence) with a 1.5 s pause inside it.
    s = session(end_silence_ms=2000)
    requests = spied(s)
    events = run(s, spans=[(0.3, 1.0), (2.5, 3.2)], total_s=5.5)
    assert finals(events) == {0: "b0 b1"}
    starts = [r.start_sample / SR for r in requests if r.kind is not RequestKind.PARTIAL]
    # The second piece starts a block (100 ms) before the block in which speech came
    # back, not at the pause's start (1.0 s): a model is not handed the second of quiet.
    assert starts[0] == 0.3 and 2.25 <= starts[1] <= 2.5, starts
    late = [r for r in requests if r.kind is RequestKind.PARTIAL and r.start_sample > SR * 1.5]
    assert all(r.start_sample >= SR * 2.25 for r in late)


def test_a_longest_piece_cut_in_a_pause_also_leaves_the_pause_out_of_the_next() -> None:
    # Words 50 ms apart (no pause the VAD hears) until 4.1 s: the piece reaches its
    # longest (4 s) 200 ms into the pause that follows, before the commit silence (250 ms),
    # so it is cut at its quietest point, inside that pause. The next word is at 5.8 s.
    spans = [(0.3 + 0.35 * k, 0.6 + 0.35 * k) for k in range(11)] + [(5.8, 6.5)]
    s = session(end_silence_ms=2000)
    requests = spied(s)
    events = run(s, spans=spans, total_s=8.0)
    assert finals(events) == {0: " ".join(f"b{k}" for k in range(12))}
    starts = [r.start_sample / SR for r in requests if r.kind is not RequestKind.PARTIAL]
    assert len(starts) == 2 and 5.55 <= starts[1] <= 5.8, starts


def test_an_utterance_that_ends_inside_a_pause_decodes_none_of_the_pause() -> None:
    # The word is committed at its pause; the stream stops 1.2 s into the pause (before
    # the 2 s end silence), which ends the utterance there.
    s = session(end_silence_ms=2000)
    requests = spied(s)
    events = run(s, spans=[(0.3, 1.0)], total_s=2.2)
    assert finals(events) == {0: "b0"}
    decoded = [r for r in requests if r.kind is not RequestKind.PARTIAL]
    # Decoded once, from the word's start to 250 ms (the commit silence) into its pause.
    assert [(r.start_sample, r.num_samples) for r in decoded] == [(int(0.3 * SR), int(0.95 * SR))]


def test_with_commits_off_nothing_is_committed_and_partials_promise_nothing() -> None:
    events = run(session(CommitPolicy("off")))
    assert finals(events) == {0: "b0 b1 b2", 1: "b3 b4"}
    assert not any(isinstance(e, Committed) for _, e in events)
    assert all(e.stable_chars == 0 for _, e in events if isinstance(e, Partial))


def test_speech_without_a_pause_is_cut_at_its_quietest_point() -> None:
    # 5 s of words 50 ms apart (no pause the VAD hears) and a 4 s longest piece.
    spans = [(0.3 + 0.35 * k, 0.6 + 0.35 * k) for k in range(15)]
    events = run(session(), spans=spans)
    committed = "".join(e.text for _, e in events if isinstance(e, Committed))
    (final,) = finals(events).values()
    assert committed and final.startswith(committed)
    assert final == " ".join(f"b{k}" for k in range(15))


@settings(max_examples=30, deadline=None)
@given(
    frame=st.sampled_from([320, 1234, 3200, 16000, 64000]),
    delay=st.floats(0.0, 1.5),
    seed=st.integers(0, 2**16),
)
def test_committed_text_is_always_a_prefix_of_its_final(
    frame: int, delay: float, seed: int
) -> None:
    events = run(session(), frame_bytes=frame, delay_s=delay, rng=random.Random(seed))
    text = finals(events)
    assert text == {0: "b0 b1 b2", 1: "b3 b4"}
    joined: dict[int, str] = {}
    for _, e in events:
        if isinstance(e, Committed):
            joined[e.utt_id] = joined.get(e.utt_id, "") + e.text
            assert text[e.utt_id].startswith(joined[e.utt_id])
        if isinstance(e, Partial):
            assert text[e.utt_id].startswith(e.text[: e.stable_chars])


def test_no_partial_decodes_a_pause_that_a_commit_decodes() -> None:
    # Partials fall due every 400 ms, so some fall inside the 300 ms pauses. There the
    # commit (250 ms into the pause) decodes the piece: a partial of it would be wasted.
    s = session()
    requests = spied(s)
    events = run(s)
    assert finals(events) == {0: "b0 b1 b2", 1: "b3 b4"}
    partial_ends = [
        (r.start_sample + r.num_samples) / SR for r in requests if r.kind is RequestKind.PARTIAL
    ]
    pauses = [(a[1], b[0]) for a, b in itertools.pairwise(SPANS) if b[0] - a[1] < 1]
    in_pause = [t for t in partial_ends for a, b in pauses if a < t <= b]
    assert partial_ends and not in_pause, (partial_ends, pauses)
    # Partials still show the open piece's words between commits.
    shown = [e.text for _, e in events if isinstance(e, Partial)]
    assert any(text.endswith("b1") for text in shown), shown
