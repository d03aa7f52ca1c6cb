"""scripts/bench.py's pure parts: load plans, final matching, histograms, capacity search."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[2]


bench = load_script("bench")


def fake_pool(seconds: list[float]) -> list[Any]:
    frame = b"\x01\x00" * bench.FRAME_SAMPLES
    return [
        bench.Clip("en-us", f"clip {s}", (frame,) * math.ceil(s * 10), int(s * 16000))
        for s in seconds
    ]


@pytest.mark.parametrize("ratio", [0.3, 0.5, 0.7])
def test_plan_meets_the_speech_ratio_and_leaves_the_vad_room(ratio: float) -> None:
    config = bench.BenchConfig(duration_s=600, speech_ratio=ratio, end_silence_ms=500)
    pool = fake_pool([2.0, 4.5, 7.0, 11.9])
    plan = bench.plan_stream(random.Random(1), pool, (b"\0" * 3200,), config, 0.0)
    assert len(plan.frames) == 6000
    speech = sum(u.end_ms - u.start_ms for u in plan.utterances) / 1000
    assert abs(speech / 600 - ratio) < 0.1
    for before, after in zip(plan.utterances, plan.utterances[1:], strict=False):
        assert after.start_ms - before.end_ms >= 1000  # end-silence + 500 ms
    assert plan.utterances[-1].last_frame < 6000 - 15  # end-silence + 1 s tail
    for utt in plan.utterances:
        assert 2000 <= utt.end_ms - utt.start_ms <= 12_000


def test_a_short_run_still_holds_one_utterance() -> None:
    config = bench.BenchConfig(duration_s=5, end_silence_ms=500)
    pool = fake_pool([2.4, 5.0, 9.0])
    for seed in range(20):
        plan = bench.plan_stream(random.Random(seed), pool, (b"\0" * 3200,), config, 0.0)
        assert len(plan.utterances) == 1


def test_finals_match_the_utterance_they_overlap_most() -> None:
    utts = [bench.Utterance(10, 39, 1000, 3950), bench.Utterance(60, 99, 6000, 9950)]
    finals = [
        (0, 900.0, 4300.0, 5.0, None),
        (1, 5900.0, 7000.0, 8.0, None),  # the VAD split the second utterance
        (2, 7100.0, 10300.0, 11.0, None),
        (3, 4500.0, 5000.0, 6.0, None),  # noise between them
    ]
    matched, unmatched = bench.match_finals(utts, finals)
    assert unmatched == 1
    assert [f[0] for f in matched[0]] == [0]
    assert [f[0] for f in matched[1]] == [1, 2]


def test_stream_latencies_come_from_send_times() -> None:
    plan = bench.StreamPlan(0.0, (b"",) * 30, (bench.Utterance(2, 11, 200, 1150),))
    log = bench.StreamLog(t0=100.0, sent_at=[100.0 + i / 10 for i in range(30)])
    log.partials = [(0, 100.6), (0, 101.0), (0, 101.5)]
    log.finals = [(0, 100.0, 1700.0, 102.3, 1800.0)]
    samples = bench.Samples()
    bench.collect_stream(plan, log, samples)
    assert samples.final == pytest.approx([1200.0])  # 102.3 - sent_at[11] (101.1)
    # The server decided at 1800 ms of audio, 650 ms after the speech ended at 1150 ms; the
    # frame ending at 1800 ms (index 17) went out at 101.7.
    assert samples.vad_end_silence == pytest.approx([650.0])
    assert samples.after_vad == pytest.approx([600.0])
    assert samples.first_partial == pytest.approx([400.0])  # 100.6 - sent_at[2]
    assert samples.partial_gaps == pytest.approx([400.0, 500.0])
    assert (samples.matched, samples.extra, samples.unmatched) == (1, 0, 0)


def test_the_criterion_uses_the_measured_vad_split_when_the_server_gives_it() -> None:
    p = bench.percentiles
    old_server = bench.Latency(p([900.0]), p([400.0]), p([]), p([]), p([]), p([]))
    assert bench.judged_final_latency(old_server).p95 == 400.0
    new_server = bench.Latency(p([900.0]), p([400.0]), p([650.0]), p([250.0]), p([]), p([]))
    assert bench.judged_final_latency(new_server).p95 == 250.0
    assert bench.judge(new_server, 0, 0, bench.Criteria(max_final_latency_ms=200.0)) == (
        "final latency p95 250.0 ms > 200.0",
    )


def test_histogram_delta_quantiles_and_batch_buckets() -> None:
    inf = float("inf")
    before = bench.Histogram((1, 2, 4, inf), (5, 5, 5, 5), 5.0, 5)
    after = bench.Histogram((1, 2, 4, inf), (5, 15, 25, 25), 65.0, 25)
    delta = after.minus(before)
    assert delta.count == 20 and delta.total == 60.0
    assert bench.batch_distribution(delta) == {"2": 10, "3-4": 10}
    assert delta.quantile(0.5) == pytest.approx(2.0)
    assert delta.quantile(0.75) == pytest.approx(3.0)
    assert bench.Histogram((1, inf), (0, 0), 0.0, 0).quantile(0.5) is None


@pytest.mark.parametrize(("capacity", "start", "limit"), [(13, 1, 1024), (0, 4, 64), (64, 1, 64)])
def test_capacity_search_finds_the_largest_passing_n(capacity: int, start: int, limit: int) -> None:
    tried: list[int] = []

    def passes(n: int) -> bool:
        tried.append(n)
        return n <= capacity

    assert bench.find_capacity(passes, start, limit) == capacity
    assert len(tried) <= 2 * limit.bit_length()


def test_end_silence_from_the_command_line_or_stats() -> None:
    config = bench.BenchConfig(end_silence_ms=500)
    command = bench.Target(
        "x", command=("python", "--end-silence-ms", "300", "--end-silence-ms=700")
    )
    assert bench.resolve_end_silence(None, command, config) == (700, "server command line")
    assert bench.resolve_end_silence({"vad": {"end_silence_ms": 250}}, command, config)[0] == 250
    assert bench.resolve_end_silence({}, bench.Target("y", url="ws://h:1/ws"), config)[0] == 500
    assert bench.http_base("ws://127.0.0.1:8765/ws") == "http://127.0.0.1:8765"


def test_two_capacity_searches_take_turns() -> None:
    order: list[tuple[str, int]] = []

    def check(name: str, capacity: int) -> Callable[[int], bool]:
        def passes(n: int) -> bool:
            order.append((name, n))
            return n <= capacity

        return passes

    found = bench.interleave_searches([check("a", 5), check("b", 12)], 4, 32)
    assert found == [5, 12]
    # Turns alternate while both searches run, so drift in the machine's speed hits both.
    names = [name for name, _ in order]
    a_runs = names.count("a")
    assert names[: 2 * a_runs] == ["a", "b"] * a_runs
    assert set(names[2 * a_runs :]) <= {"b"}
