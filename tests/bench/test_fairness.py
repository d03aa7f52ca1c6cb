"""The fairness benchmark's measures: a final's latency from the frame that completed its
audio, and the summaries the ratios come from."""

from __future__ import annotations

import pytest

from sensestream.client import Outcome
from tools.bench.common.finals import latencies_ms
from tools.bench.fairness import summary


def outcome() -> Outcome:
    """Ten 100 ms frames sent at t = 10.0, 10.1, ...; two finals, one without decided_ms."""
    seen = Outcome()
    seen.sent_at = [10.0 + 0.1 * i for i in range(10)]
    seen.events = [
        {"type": "final", "end_ms": 450, "decided_ms": 700},
        {"type": "partial", "end_ms": 500},
        {"type": "final", "end_ms": 1000, "decided_ms": None},
    ]
    seen.times = [10.9, 10.95, 11.5]
    return seen


def test_latency_runs_from_the_frame_that_completed_the_audio() -> None:
    # 450 ms lies in frame 4 (sent at 10.4); 700 ms ends frame 6 (sent at 10.6).
    assert latencies_ms(outcome(), "end_ms") == pytest.approx([500.0, 600.0])
    assert latencies_ms(outcome(), "decided_ms") == pytest.approx([300.0])


def test_a_final_past_the_frames_sent_is_not_counted() -> None:
    seen = outcome()
    seen.sent_at = seen.sent_at[:5]
    assert latencies_ms(seen, "end_ms") == pytest.approx([500.0])


def test_summary_gives_the_median_and_the_nearest_rank_p95() -> None:
    values = [float(v) for v in range(1, 21)]
    assert summary(values) == {"count": 20, "p50_ms": 10.5, "p95_ms": 19.0, "mean_ms": 10.5}
    assert summary([]) == {"count": 0}
