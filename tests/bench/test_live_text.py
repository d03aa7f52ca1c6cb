"""The live-text benchmark's measures, on a made-up session: word ends, what a commit holds,
the share committed before each final, and the latencies measured from frames sent."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from sensestream.client import Outcome
from tools.bench.live_text import (
    Clause,
    Utterance,
    acceptance,
    committed_shares,
    final_latencies,
    held_latencies,
    layout,
    monotone_ends,
    pauses_taken,
    per_speech_s,
    word_latencies,
    word_range,
    words_of,
)

TOKENS = [
    {"text": " I", "start_ms": 1000, "end_ms": 1100},
    {"text": " moved", "start_ms": 1100, "end_ms": 1400},
    {"text": ".", "start_ms": 1400, "end_ms": 1500},
    {"text": " Your", "start_ms": 2000, "end_ms": 2200},
    {"text": " re", "start_ms": 2200, "end_ms": 2300},
    {"text": "f", "start_ms": 2300, "end_ms": 2600},
]
TEXT = "I moved. Your ref"


def session(events: list[tuple[float, dict[str, Any]]], frames: int = 60) -> Outcome:
    """Frames of 100 ms sent at 0.0, 0.1, ...; each event arriving at its time."""
    outcome = Outcome(sent_at=[i / 10 for i in range(frames)])
    for at, event in events:
        outcome.events.append(event)
        outcome.times.append(at)
    return outcome


def committed(utt: int, start: int, end: int, text: str) -> dict[str, Any]:
    return {"type": "committed", "utt_id": utt, "start_ms": start, "end_ms": end, "text": text}


def final(utt: int, start: int, end: int, text: str, **more: Any) -> dict[str, Any]:
    return {"type": "final", "utt_id": utt, "start_ms": start, "end_ms": end, "text": text} | more


def test_clauses_are_laid_out_with_their_gaps() -> None:
    spans = layout([[10, 20], [5]], lead=100, clause_gap=3, utterance_gap=50)
    assert spans == [[(100, 110), (113, 133)], [(183, 188)]]


def test_word_ends_never_run_back_nor_past_the_clause() -> None:
    assert monotone_ends([30, 25, 90, 80], 80) == (30, 30, 80, 80)
    assert monotone_ends([50], 70) == (70,)  # one word: it ends with the clause
    assert monotone_ends([], 70) == ()


def test_words_are_found_in_the_text_from_their_tokens() -> None:
    ends = [(w.end_char, w.end_ms) for w in words_of(TEXT, TOKENS)]
    # "moved." ends with its full stop; "ref" is three tokens, timed by its last.
    assert ends == [(1, 1100), (8, 1500), (13, 2200), (17, 2600)]
    assert [w.end_char for w in words_of("I moved", [{"text": " x", "end_ms": 5}])] == []


def test_a_word_counts_from_its_last_sample_to_the_commit_that_holds_it() -> None:
    outcome = session(
        [
            (2.0, committed(0, 900, 1600, "I moved.")),
            (3.5, final(0, 900, 2700, TEXT, tokens=TOKENS)),
        ]
    )
    every, first = word_latencies(outcome)
    # "I" ends at 1100 ms: the frame of 1000-1100 ms went out at 1.0 s, its commit came at 2.0.
    assert every == pytest.approx([1000, 600, 1400, 1000])  # the last two: the final's arrival
    assert first == pytest.approx([1000, 600])


def test_spoken_words_are_held_by_the_first_event_whose_audio_holds_them() -> None:
    outcome = session(
        [
            (2.0, committed(0, 900, 1600, "I moved.")),
            (3.5, final(0, 900, 2700, TEXT)),
            (4.0, final(1, 3800, 4200, "")),
        ]
    )
    latencies, commits = held_latencies(outcome, [1100, 1650, 2500, 3000])
    # 1650 ms lies within the slack after the commit's end; 3000 ms in no event's audio.
    assert latencies == pytest.approx([1000, 400, 1100])
    assert commits == 2


def test_the_committed_share_counts_long_finals_and_checks_their_start() -> None:
    outcome = session(
        [
            (2.0, committed(0, 0, 2000, "I moved.")),
            (2.5, committed(0, 2000, 3000, " Your")),
            (4.0, final(0, 0, 4000, "I moved. Your ref")),
            (5.0, final(1, 4500, 6000, "short")),  # 1.5 s: not counted
            (9.0, committed(2, 6000, 7000, "Wrong")),
            (9.5, final(2, 6000, 9500, "Right text")),
        ]
    )
    rows = committed_shares(outcome)
    assert [(r["utt_id"], r["share"], r["prefix"]) for r in rows] == [
        (0, round(13 / 17, 3), True),
        (2, 0.5, False),
    ]


def test_final_latency_runs_from_the_utterances_own_last_sample() -> None:
    made = [
        Utterance((Clause("a", 16000, 32000, (32000,)),)),  # 1.0-2.0 s
        Utterance((Clause("b", 64000, 96000, (96000,)),)),  # 4.0-6.0 s
    ]
    outcome = session(
        [
            (2.4, final(0, 900, 1500, "a")),  # the voice detector split the first utterance
            (2.7, final(1, 1500, 2100, "a")),
            (3.0, final(2, 2500, 3000, "")),  # nothing said: not counted
            (6.5, final(3, 3900, 6100, "b")),
        ]
    )
    # The last final of each: 2.7 s against the frame of 1.9-2.0 s, sent at 1.9 s.
    assert final_latencies(outcome, made) == pytest.approx([800, 600])


def test_each_pause_between_clauses_is_a_cut_an_end_or_neither() -> None:
    clauses = [Clause(str(k), 16000 * k, 16000 * k + 12800, ()) for k in range(4)]  # 0.8 s
    made = [Utterance(tuple(clauses))]  # pauses at 0.8-1.0, 1.8-2.0 and 2.8-3.0 s
    outcome = session(
        [
            (1.2, committed(0, 0, 900, "0")),
            (2.4, final(0, 0, 1950, "0 1")),
            (3.5, final(1, 2000, 3900, "2 3")),
        ]
    )
    assert pauses_taken(outcome, made) == {"ended_utterance": 1, "committed": 1, "neither": 1}


def test_decoded_audio_is_per_second_of_speech_over_every_session() -> None:
    decoded = [{"final": 10.0, "partial": 30.0}, {"final": 12.0, "partial": 28.0}]
    assert per_speech_s(decoded, 20.0) == {"final": 0.55, "partial": 1.45, "all": 2.0}
    assert per_speech_s([None], 20.0) is None


def test_acceptance_holds_each_bar() -> None:
    def arm(p50: float, p95: float, share: float | None, final: float, wer: float) -> Any:
        return {
            "commit_latency_ms": {"p50": p50, "p95": p95},
            "committed_share_mean": share,
            "final_latency_ms": {"p50": final},
            "wer": wer,
        }

    checks = acceptance(
        {"pauses": arm(900, 2100, 0.7, 400, 0.104), "off": arm(2500, 5000, 0.0, 450, 0.1)}
    )
    assert {k: v["pass"] for k, v in checks.items()} == {
        "commit_latency_p50_ms": True,
        "commit_latency_p95_ms": False,
        "committed_share_mean": True,
        "final_latency_p50_falls_ms": True,
        "wer_with_commits": True,
    }
    none = acceptance({"pauses": arm(900, 1000, None, 400, 0.2), "off": arm(1, 1, 0, 450, 0.1)})
    assert none["committed_share_mean"]["pass"] is None
    assert none["wer_with_commits"]["pass"] is False


def test_phrase_word_ranges_are_checked() -> None:
    assert word_range("2,5") == (2, 5) and word_range("0,0") == (0, 0)
    for bad in ("5,2", "0,3", "x,1", "4"):
        with pytest.raises(argparse.ArgumentTypeError):
            word_range(bad)
