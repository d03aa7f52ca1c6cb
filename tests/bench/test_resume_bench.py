"""tools.bench.resume's arithmetic: the next final after each catch-up, and the summary."""

from __future__ import annotations

import pytest

from sensestream.resuming import Resumable
from tools.bench.resume import after_catch_up, beyond_audio, summary


def test_the_next_final_after_each_catch_up_is_timed_from_it() -> None:
    seen = Resumable()
    for kind, at in (("final", 1.0), ("resumed", 2.0), ("partial", 2.6), ("final", 3.5)):
        seen.events.append({"type": kind})
        seen.times.append(at)
    seen.caught_up, seen.caught_up_ms = [2.5, 4.0], [0.0, 0.0]  # the second: no final after
    assert after_catch_up(seen) == [1.0]


def test_a_resume_whose_next_final_comes_after_another_drop_is_not_timed() -> None:
    # The second drop's delay would be counted as the first resume's: its own resume is
    # timed instead.
    seen = Resumable()
    for kind, end_ms, at in (("resumed", 0, 1.0), ("resumed", 0, 2.5), ("final", 6000, 3.0)):
        seen.events.append({"type": kind, "end_ms": end_ms})
        seen.times.append(at)
    seen.gaps = [(0.9, 1.0), (2.4, 2.5)]
    seen.caught_up, seen.caught_up_ms = [1.5, 2.8], [4000.0, 5800.0]
    assert after_catch_up(seen) == pytest.approx([0.2])
    assert beyond_audio(seen, 4.0) == pytest.approx([0.15])


def test_the_delay_beyond_the_audio_leaves_out_the_rest_of_the_utterance() -> None:
    seen = Resumable()
    for kind, end_ms, at in (("final", 1000, 1.0), ("final", 6000, 3.0), ("final", 7000, 3.1)):
        seen.events.append({"type": kind, "end_ms": end_ms})
        seen.times.append(at)
    # Caught up at 2.0 s with the stream at 4.0 s: the next final ends 2 s of audio later,
    # which at 4x is 0.5 s of sending; it came 1.0 s after, so 0.5 s is the resume's.
    seen.caught_up, seen.caught_up_ms = [2.0, 3.05], [4000.0, 8000.0]
    assert beyond_audio(seen, 4.0) == pytest.approx([0.5, 0.05])


def test_the_summary_pools_every_run() -> None:
    runs = [
        {
            "finals_equal_uncut": True,
            "drop_to_resumed_s": [0.1, 0.2],
            "catch_up_to_next_final_s": [0.5],
        },
        {"finals_equal_uncut": False, "drop_to_resumed_s": [0.3], "catch_up_to_next_final_s": []},
    ]
    out = summary({"runs": runs})
    assert out["resumes"] == 3 and out["runs_with_finals_equal_uncut"] == 1
    assert out["drop_to_resumed_s"]["max"] == 0.3 and out["catch_up_to_next_final_s"]["p50"] == 0.5
