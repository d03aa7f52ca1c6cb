"""tools.bench.calls' pure parts: the call builder, the per-channel analysis, the verdict."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sensestream.client import Outcome
from streaming.audio.decoder import ulaw_to_linear
from tools.bench.calls.audio import FRAME_SAMPLES, RATE, interleave, mulaw
from tools.bench.calls.calls import (
    LABELS,
    TurnShape,
    build_call,
    overlap_ms,
    plan_turns,
    speech_share,
    utterance_of,
)
from tools.bench.calls.load import MONO, STEREO, Client, Seen, mono_clients, stereo_clients
from tools.bench.calls.measure import analyse, protocol_problems
from tools.bench.calls.report import level, ratio
from tools.bench.calls.rounds import arm_order
from tools.bench.capacity.config import BenchConfig, Criteria
from tools.bench.capacity.load import LoadOutcome, stream_log
from tools.bench.capacity.plan import Utterance
from tools.bench.capacity.scrape import Snapshot
from tools.bench.capacity.server_load import ServerLoad

REPO = Path(__file__).resolve().parents[2]
# The corpus's sentences run 2.4-11.5 s.
LENGTHS_MS = [2400.0, 2900.0, 3300.0, 4000.0, 5200.0, 5900.0, 7000.0, 8500.0, 10500.0, 11500.0]


def decode(data: bytes) -> np.ndarray:
    return ulaw_to_linear()[np.frombuffer(data, np.uint8)].astype(np.float64) / 32768


def test_each_party_speaks_about_half_a_long_call_with_some_overlap() -> None:
    shape = TurnShape()
    for seed in range(5):
        turns = plan_turns(random.Random(seed), LENGTHS_MS, 600_000, shape)
        shares = [sum(t.length_ms for t in turns if t.channel == c) / 600_000 for c in (0, 1)]
        assert all(0.4 <= s <= 0.6 for s in shares), shares
        assert [t.channel for t in turns[1:]] == [1 - t.channel for t in turns[:-1]]
        cut_in = [b.start_ms < a.end_ms for a, b in itertools.pairwise(turns)]
        assert 0.1 <= sum(cut_in) / len(cut_in) <= 0.4  # crosstalk in about a quarter
        for a, b in itertools.pairwise(turns):
            assert b.start_ms >= a.start_ms + a.length_ms / 2  # never cuts in before halfway
        for c in (0, 1):
            own = [t for t in turns if t.channel == c]
            for a, b in itertools.pairwise(own):
                assert b.start_ms - a.end_ms >= shape.min_own_gap_ms  # the VAD keeps them apart
        assert turns[-1].end_ms + shape.tail_ms <= 600_000


def test_a_turn_spans_the_frames_that_carry_its_samples() -> None:
    utt = utterance_of(plan_turns(random.Random(0), [2450.0], 10_000, TurnShape())[0])
    assert utt.first_frame == int(utt.start_ms) // 100
    assert utt.last_frame == -(-int(utt.start_ms + 2450) // 100) - 1
    assert utt.end_ms - utt.start_ms == 2450.0


def tone(seconds: float, amplitude: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (amplitude * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def test_a_call_puts_each_party_on_its_channel_and_interleaves_them_sample_by_sample() -> None:
    clips = [tone(2.5, 0.3), tone(4.0, 0.5), tone(3.2, 0.4)]
    call = build_call(random.Random(3), clips, 40.0, seed=3)
    assert [len(c) for c in call.channels] == [40 * RATE] * 2
    stereo = b"".join(call.stereo_frames)
    assert stereo[0::2] == call.channels[0] and stereo[1::2] == call.channels[1]
    assert {len(f) for f in call.stereo_frames} == {2 * FRAME_SAMPLES}  # 100 ms, two channels
    assert {len(f) for f in call.mono_frames(1)} == {FRAME_SAMPLES}
    assert b"".join(call.mono_frames(1)) == call.channels[1]
    for channel, utterances in enumerate(call.utterances):
        audio = decode(call.channels[channel])
        loud = np.zeros(audio.size, bool)
        for u in utterances:
            loud[int(u.start_ms * 8) : int(u.end_ms * 8)] = True
        assert np.sqrt(np.mean(audio[loud] ** 2)) > 0.1  # its party's speech...
        assert np.sqrt(np.mean(audio[~loud] ** 2)) < 0.001  # ...and only the noise floor else
    assert 0.25 <= speech_share(call, 0, 40.0) <= 0.65
    assert overlap_ms(call) >= 0


def test_mulaw_is_the_nearest_code_by_the_servers_table() -> None:
    top = ulaw_to_linear().max() / 32768  # μ-law's largest value, 32124
    samples = np.linspace(-top, top, 20001)
    back = decode(mulaw(samples))
    step = np.diff(np.unique(ulaw_to_linear())).astype(np.float64) / 32768
    assert np.all(np.abs(back - samples) <= step.max() / 2 + 1 / 32768)  # and the rounding to int16
    assert np.abs(back - samples)[np.abs(samples) < 0.01].max() < 0.0005  # fine steps near 0
    assert interleave([b"\x01\x02", b"\x03\x04"]) == b"\x01\x03\x02\x04"
    with pytest.raises(ValueError, match="differ"):
        interleave([b"\x01", b"\x02\x03"])


def test_both_arms_carry_the_same_audio_and_pacing() -> None:
    config = BenchConfig(duration_s=20.0, ramp_s=2.0)
    calls = [
        build_call(random.Random(i), [tone(2.5, 0.3), tone(3.0, 0.3)], 20.0, i) for i in (0, 1)
    ]
    stereo, mono = stereo_clients(calls, config), mono_clients(calls, config)
    assert [c.start["stream_id"] for c in stereo] == ["call-0", "call-1"]
    assert stereo[0].start["channel_labels"] == ["agent", "customer"]
    assert stereo[0].start["multichannel"] is True and stereo[0].start["encoding"] == "mulaw"
    assert len(mono) == 4 and "channels" not in mono[0].start
    for i, call in enumerate(stereo):
        left, right = mono[2 * i], mono[2 * i + 1]
        assert left.start_delay_s == right.start_delay_s == call.start_delay_s
        assert b"".join(call.frames)[0::2] == b"".join(left.frames)
        assert b"".join(call.frames)[1::2] == b"".join(right.frames)
        assert (left.utterances[0], right.utterances[0]) == call.utterances
    assert arm_order(0) == (STEREO, MONO) and arm_order(1) == (MONO, STEREO)


# --- the analysis, on what a client would have recorded -----------------------------------

SENT = [100.0 + i / 10 for i in range(60)]
UTTERANCES = ((Utterance(2, 11, 200, 1150),), (Utterance(30, 39, 3000, 3950),))


Timed = list[tuple[dict[str, Any], float]]


def utterance_events(utt: Utterance, delay_s: float, channel: int | None) -> Timed:
    """A partial and a final; the final comes `delay_s` after the frame where the VAD
    decided (650 ms after the speech) went out."""
    decided = utt.end_ms + 650
    tag = {} if channel is None else {"channel": channel, "label": LABELS[channel]}
    frame = -(-int(decided) // 100) - 1
    final = {"type": "final", "utt_id": 0, "start_ms": utt.start_ms, "end_ms": utt.end_ms}
    return [
        ({"type": "partial", "utt_id": 0, **tag}, SENT[utt.first_frame] + 0.3),
        ({**final, "decided_ms": decided, **tag}, SENT[frame] + delay_s),
    ]


def outcome_of(start: dict[str, Any], timed: Timed) -> Outcome:
    outcome = Outcome(started_at=100.0, sent_at=list(SENT))
    config = {k: v for k, v in start.items() if k != "type"}
    timed = [({"type": "ready", "config": config}, 100.0), *sorted(timed, key=lambda x: x[1])]
    timed.append(({"type": "end"}, 110.0))
    outcome.events = [e for e, _ in timed]
    outcome.times = [t for _, t in timed]
    return outcome


def server(cpu: float, busy: float) -> ServerLoad:
    return ServerLoad(
        1.0, None, 10, None, cpu, None, None, None, None, 0, 3, {"final": 4.0}, busy, None
    )


def arm_run(arm: str, delays: tuple[float, float], cpu: float, round_no: int = 0) -> Any:
    """An arm's analysis of one call whose two finals came `delays` after the decision."""
    config = BenchConfig(criteria=Criteria(max_final_latency_ms=1000.0))
    stereo_start = {"type": "start", "channels": 2, "channel_labels": list(LABELS)}
    if arm == STEREO:
        events = [e for c in (0, 1) for e in utterance_events(UTTERANCES[c][0], delays[c], c)]
        clients = [Client("call-0", stereo_start, (), 0.0, UTTERANCES)]
        outcomes = [outcome_of(stereo_start, events)]
    else:
        clients = [Client(f"m{c}", {"type": "start"}, (), 0.0, (UTTERANCES[c],)) for c in (0, 1)]
        outcomes = [
            outcome_of({"type": "start"}, utterance_events(UTTERANCES[c][0], delays[c], None))
            for c in (0, 1)
        ]
    seen = [Seen(o, None) for o in outcomes]
    logs = tuple(stream_log(o, None) for o in outcomes)
    load = LoadOutcome(logs, 10.0, 0.1, Snapshot({}, None), ())
    return analyse(
        clients,
        seen,
        arm=arm,
        calls=1,
        round_no=round_no,
        outcome=load,
        server=server(cpu, 5.0),
        config=config,
    )


def test_a_stereo_call_is_measured_per_channel_like_two_mono_streams() -> None:
    stereo, stereo_samples = arm_run(STEREO, (0.2, 0.4), cpu=50.0)
    mono, mono_samples = arm_run(MONO, (0.2, 0.4), cpu=50.0)
    assert stereo_samples.after_vad == pytest.approx([200.0, 400.0])
    assert mono_samples.after_vad == pytest.approx(stereo_samples.after_vad)
    assert stereo_samples.first_partial == pytest.approx([300.0, 300.0])
    assert (stereo.sessions, stereo.channels, stereo.finals) == (1, 2, 2)
    assert (mono.sessions, mono.channels, mono.finals) == (2, 2, 2)
    assert stereo.matched_utterances == mono.matched_utterances == 2
    assert stereo.passed and mono.passed
    assert stereo.errors == stereo.protocol_problem_count == 0


def test_protocol_problems_name_missing_channels_wrong_labels_and_ready_fields() -> None:
    start = {"type": "start", "channels": 2, "channel_labels": list(LABELS), "stream_id": "c"}
    client = Client("call-0", start, (), 0.0, UTTERANCES)
    events = [
        ({"type": "final", "utt_id": 0, "channel": 1, "label": "agent"}, 101.0),
        ({"type": "partial", "utt_id": 0}, 101.1),
    ]
    outcome = outcome_of(start | {"stream_id": "other"}, events)
    problems = protocol_problems(client, outcome)
    assert problems == [
        "ready.config.stream_id is 'other', sent 'c'",
        "call-0: channel 1 labelled 'agent'",
        "call-0: partial without a valid channel: None",
    ]
    mono = Client("m", {"type": "start"}, (), 0.0, (UTTERANCES[0],))
    tagged = outcome_of({"type": "start"}, [({"type": "final", "channel": 0}, 101.0)])
    assert protocol_problems(mono, tagged) == ["m: mono final has channel 0"]


def test_the_report_pools_rounds_gives_b_over_a_and_judges_the_calls() -> None:
    rounds = [
        arm_run(STEREO, (0.2, 0.4), cpu=50.0, round_no=0),
        arm_run(MONO, (0.3, 0.5), cpu=60.0, round_no=0),
        arm_run(MONO, (0.2, 0.3), cpu=60.0, round_no=1),
        arm_run(STEREO, (0.9, 1.5), cpu=40.0, round_no=1),  # one final past the 1000 ms bound
    ]
    result = level(1, [r for r, _ in rounds], [s for _, s in rounds], BenchConfig())
    stereo, mono = result[STEREO], result[MONO]
    assert stereo["rounds"] == 2 and stereo["finals"] == 4
    assert stereo["final_after_vad_ms"]["p50"] == pytest.approx(650.0)
    assert stereo["server_cpu_percent_mean"] == 45.0 and stereo["engine_busy_s"] == 10.0
    assert stereo["decoded_audio_s"] == {"final": 8.0}
    ratios = result["ratio_mono_over_stereo"]
    assert ratios["final_after_vad_p95"] == pytest.approx(
        mono["final_after_vad_ms"]["p95"] / stereo["final_after_vad_ms"]["p95"], abs=1e-3
    )
    assert ratios["server_cpu_percent"] == pytest.approx(60 / 45, abs=1e-3)
    assert ratios["finals"] == 1.0
    assert result["paired_final_p95_ratios"] == [
        pytest.approx(490 / 390, abs=1e-3),
        pytest.approx(295 / 1470, abs=1e-3),
    ]
    verdict = result["verdict"]
    assert verdict["mono_within_bounds"] and not verdict["calls_within_bounds"]
    assert verdict["calls_failed"][0].startswith("final latency p95")
    assert ratio(None, 1.0) is None and ratio(1.0, 0.0) is None


# --- end to end -----------------------------------------------------------------------------


def test_bench_calls_end_to_end_on_the_tiny_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "calls.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "bench_calls.py"),
            *("--spawn-server", str(tiny_model_dir), "--server-args", "--precision fp32"),
            *("--calls", "1", "--rounds", "1", "--duration", "8"),
            *("--speech-dir", str(tmp_path / "speech"), "--json", str(out)),
        ],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["host"]["cpu"]  # the model and its flags
    (result,) = report["levels"]
    for arm, sessions in ((STEREO, 1), (MONO, 2)):
        summary = result[arm]
        assert summary["sessions"] == sessions and summary["channels"] == 2
        assert summary["errors"] == summary["protocol_problems"] == 0, result["runs"]
        assert summary["finals"] >= 1, proc.stderr
        assert summary["final_after_vad_ms"]["count"] >= 1
    assert result["ratio_mono_over_stereo"]["finals"] is not None
    assert set(result["verdict"]) >= {"calls_within_bounds", "mono_within_bounds"}
