"""tools.bench.capacity's pure parts: load plans, final matching, histograms, capacity search."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import numpy as np
import pytest

from sensestream.client import ClientError, Outcome
from tools.bench.capacity.config import BenchConfig, Criteria
from tools.bench.capacity.corpus import FRAME_SAMPLES, Clip, with_pauses
from tools.bench.capacity.latency import (
    Latency,
    Samples,
    collect_stream,
    judge,
    judged_final_latency,
    match_finals,
)
from tools.bench.capacity.load import stream_log
from tools.bench.capacity.plan import StreamPlan, Utterance, plan_stream
from tools.bench.capacity.scrape import Histogram, is_idle
from tools.bench.capacity.search import find_capacity, interleave_searches
from tools.bench.capacity.server_load import batch_distribution
from tools.bench.capacity.targets import Target, resolve_end_silence
from tools.bench.common.stats import percentiles
from tools.http import http_base
from tools.spawn import ServerSpec


def fake_pool(seconds: list[float]) -> list[Clip]:
    frame = b"\x01\x00" * FRAME_SAMPLES
    return [
        Clip("en-us", f"clip {s}", (frame,) * math.ceil(s * 10), int(s * 16000)) for s in seconds
    ]


@pytest.mark.parametrize("ratio", [0.3, 0.5, 0.7])
def test_plan_meets_the_speech_ratio_and_leaves_the_vad_room(ratio: float) -> None:
    config = BenchConfig(duration_s=600, speech_ratio=ratio, end_silence_ms=500)
    pool = fake_pool([2.0, 4.5, 7.0, 11.9])
    plan = plan_stream(random.Random(1), pool, (b"\0" * 3200,), config, 0.0)
    assert len(plan.frames) == 6000
    speech = sum(u.end_ms - u.start_ms for u in plan.utterances) / 1000
    assert abs(speech / 600 - ratio) < 0.1
    for before, after in zip(plan.utterances, plan.utterances[1:], strict=False):
        assert after.start_ms - before.end_ms >= 1000  # end-silence + 500 ms
    assert plan.utterances[-1].last_frame < 6000 - 15  # end-silence + 1 s tail
    for utt in plan.utterances:
        assert 2000 <= utt.end_ms - utt.start_ms <= 12_000


def test_a_short_run_still_holds_one_utterance() -> None:
    config = BenchConfig(duration_s=5, end_silence_ms=500)
    pool = fake_pool([2.4, 5.0, 9.0])
    for seed in range(20):
        plan = plan_stream(random.Random(seed), pool, (b"\0" * 3200,), config, 0.0)
        assert len(plan.utterances) == 1


def test_finals_match_the_utterance_they_overlap_most() -> None:
    utts = [Utterance(10, 39, 1000, 3950), Utterance(60, 99, 6000, 9950)]
    finals = [
        (0, 900.0, 4300.0, 5.0, None),
        (1, 5900.0, 7000.0, 8.0, None),  # the VAD split the second utterance
        (2, 7100.0, 10300.0, 11.0, None),
        (3, 4500.0, 5000.0, 6.0, None),  # noise between them
    ]
    matched, unmatched = match_finals(utts, finals)
    assert unmatched == 1
    assert [f[0] for f in matched[0]] == [0]
    assert [f[0] for f in matched[1]] == [1, 2]


def client_outcome() -> Outcome:
    """What the protocol client records for one stream: frames sent, events as they came."""
    outcome = Outcome(started_at=100.0, sent_at=[100.0 + i / 10 for i in range(30)])
    events = [
        ({"type": "ready"}, 100.01),
        ({"type": "partial", "utt_id": 0}, 100.6),
        ({"type": "partial", "utt_id": 0}, 101.0),
        ({"type": "partial", "utt_id": 0}, 101.5),
        (
            {"type": "final", "utt_id": 0, "start_ms": 100, "end_ms": 1700, "decided_ms": 1800},
            102.3,
        ),
        ({"type": "end"}, 103.1),
    ]
    for event, at in events:
        outcome.events.append(event)
        outcome.times.append(at)
    return outcome


def test_stream_latencies_come_from_send_times() -> None:
    plan = StreamPlan(0.0, (b"",) * 30, (Utterance(2, 11, 200, 1150),))
    log = stream_log(client_outcome(), None)
    assert log.ended and log.errors == ()
    samples = Samples()
    collect_stream(plan, log, samples)
    assert samples.final == pytest.approx([1200.0])  # 102.3 - sent_at[11] (101.1)
    # The server decided at 1800 ms of audio, 650 ms after the speech ended at 1150 ms; the
    # frame ending at 1800 ms (index 17) went out at 101.7.
    assert samples.vad_end_silence == pytest.approx([650.0])
    assert samples.after_vad == pytest.approx([600.0])
    assert samples.first_partial == pytest.approx([400.0])  # 100.6 - sent_at[2]
    assert samples.partial_gaps == pytest.approx([400.0, 500.0])
    assert (samples.matched, samples.extra, samples.unmatched) == (1, 0, 0)


def test_committed_text_counts_as_a_live_text_update_between_partials() -> None:
    outcome = client_outcome()
    outcome.events.insert(3, {"type": "committed", "utt_id": 0, "text": "Good morning,"})
    outcome.times.insert(3, 100.8)
    log = stream_log(outcome, None)
    assert log.partials == ((0, 100.6), (0, 100.8), (0, 101.0), (0, 101.5))
    samples = Samples()
    collect_stream(StreamPlan(0.0, (b"",) * 30, (Utterance(2, 11, 200, 1150),)), log, samples)
    assert samples.partial_gaps == pytest.approx([200.0, 200.0, 500.0])


def test_a_session_without_end_or_with_a_failure_is_an_error() -> None:
    cut = Outcome(close_code=1011)
    assert stream_log(cut, None).errors == ("session closed without `end` (close code 1011)",)
    refused = stream_log(Outcome(), ClientError("unauthorized", "server refused: 401"))
    assert refused.errors == ("unauthorized: server refused: 401",) and not refused.ended
    outcome = client_outcome()
    outcome.events.insert(1, {"type": "error", "code": "server_full", "message": "too many"})
    outcome.times.insert(1, 100.02)
    assert stream_log(outcome, None).errors == ("server_full: too many",)


def test_the_criterion_uses_the_measured_vad_split_when_the_server_gives_it() -> None:
    p = percentiles
    old_server = Latency(p([900.0]), p([400.0]), p([]), p([]), p([]), p([]))
    assert judged_final_latency(old_server).p95 == 400.0
    new_server = Latency(p([900.0]), p([400.0]), p([650.0]), p([250.0]), p([]), p([]))
    assert judged_final_latency(new_server).p95 == 250.0
    assert judge(new_server, 0, 0, Criteria(max_final_latency_ms=200.0)) == (
        "final latency p95 250.0 ms > 200.0",
    )


def test_histogram_delta_quantiles_and_batch_buckets() -> None:
    inf = float("inf")
    before = Histogram((1, 2, 4, inf), (5, 5, 5, 5), 5.0, 5)
    after = Histogram((1, 2, 4, inf), (5, 15, 25, 25), 65.0, 25)
    delta = after.minus(before)
    assert delta.count == 20 and delta.total == 60.0
    assert batch_distribution(delta) == {"2": 10, "3-4": 10}
    assert delta.quantile(0.5) == pytest.approx(2.0)
    assert delta.quantile(0.75) == pytest.approx(3.0)
    assert Histogram((1, inf), (0, 0), 0.0, 0).quantile(0.5) is None


@pytest.mark.parametrize(("capacity", "start", "limit"), [(13, 1, 1024), (0, 4, 64), (64, 1, 64)])
def test_capacity_search_finds_the_largest_passing_n(capacity: int, start: int, limit: int) -> None:
    tried: list[int] = []

    def passes(n: int) -> bool:
        tried.append(n)
        return n <= capacity

    assert find_capacity(passes, start, limit) == capacity
    assert len(tried) <= 2 * limit.bit_length()


def test_end_silence_from_the_command_line_or_stats() -> None:
    config = BenchConfig(end_silence_ms=500)
    spawned = Target("x", spec=ServerSpec(("--end-silence-ms", "300", "--end-silence-ms=700")))
    assert resolve_end_silence(None, spawned, config) == (700, "server command line")
    assert resolve_end_silence({"vad": {"end_silence_ms": 250}}, spawned, config)[0] == 250
    assert resolve_end_silence({}, Target("y", url="ws://h:1/ws"), config)[0] == 500
    assert http_base("ws://127.0.0.1:8765/ws") == "http://127.0.0.1:8765"


def test_idle_means_no_sessions_and_an_empty_queue() -> None:
    assert is_idle({"sessions": 0, "queue": {"depth": 0}})
    assert not is_idle({"sessions": 2, "queue": {"depth": 0}})
    assert not is_idle({"sessions": 0, "queue": {"depth": 3}})
    assert is_idle(None)  # a server without /stats cannot be waited for


def test_two_capacity_searches_take_turns() -> None:
    order: list[tuple[str, int]] = []

    def check(name: str, capacity: int) -> Callable[[int], bool]:
        def passes(n: int) -> bool:
            order.append((name, n))
            return n <= capacity

        return passes

    found = interleave_searches([check("a", 5), check("b", 12)], 4, 32)
    assert found == [5, 12]
    # Turns alternate while both searches run, so drift in the machine's speed hits both.
    names = [name for name, _ in order]
    a_runs = names.count("a")
    assert names[: 2 * a_runs] == ["a", "b"] * a_runs
    assert set(names[2 * a_runs :]) <= {"b"}


def test_phrases_are_joined_by_the_pause_asked_for() -> None:
    a, b = np.full(1600, 0.5, np.float32), np.full(800, -0.5, np.float32)
    joined = with_pauses([a, b], 4800, seed=0)
    assert joined.size == 1600 + 4800 + 800
    assert np.array_equal(joined[:1600], a) and np.array_equal(joined[-800:], b)
    assert float(np.abs(joined[1600:6400]).max()) < 0.01  # the pause is quiet, not speech
    assert with_pauses([a], 4800, seed=0) is a
