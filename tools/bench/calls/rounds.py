"""Rounds of both arms against one server, alternating A B, B A so drift hits both alike."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from tools.bench.calls.calls import Call, build_calls, overlap_ms, speech_share
from tools.bench.calls.load import (
    MONO,
    STEREO,
    Client,
    drive,
    mono_clients,
    stereo_clients,
)
from tools.bench.calls.measure import ArmRun, analyse
from tools.bench.calls.report import level, print_run
from tools.bench.capacity.config import BenchConfig
from tools.bench.capacity.latency import Samples
from tools.bench.capacity.load import run_loop
from tools.bench.capacity.scrape import Endpoint, snapshot
from tools.bench.capacity.server_load import server_load
from tools.bench.common.rounds import in_turn


def arm_order(round_no: int) -> tuple[str, ...]:
    """Stereo first in even rounds, mono first in odd ones."""
    return tuple(in_turn((STEREO, MONO), round_no))


def clients_for(arm: str, calls: Sequence[Call], config: BenchConfig) -> list[Client]:
    return stereo_clients(calls, config) if arm == STEREO else mono_clients(calls, config)


def run_arm(
    endpoint: Endpoint,
    arm: str,
    calls: Sequence[Call],
    round_no: int,
    config: BenchConfig,
) -> tuple[ArmRun, Samples]:
    """One arm's clients live against the server, analysed."""
    clients = clients_for(arm, calls, config)
    (outcome, seen), _ = run_loop(drive(endpoint, clients, config))
    load = server_load(outcome.before, snapshot(endpoint), outcome.stats_samples)
    run, samples = analyse(
        clients,
        seen,
        arm=arm,
        calls=len(calls),
        round_no=round_no,
        outcome=outcome,
        server=load,
        config=config,
    )
    print_run(run)
    return run, samples


def measure_level(
    endpoint: Endpoint,
    clips: Sequence[np.ndarray],
    calls: int,
    rounds: int,
    config: BenchConfig,
) -> dict[str, Any]:
    """`rounds` rounds of N stereo calls and the same calls as 2N mono streams."""
    runs: list[ArmRun] = []
    samples: list[Samples] = []
    made_all: list[Call] = []
    for round_no in range(rounds):
        made = build_calls(calls, clips, config.duration_s, config.seed + round_no)
        made_all += made
        for arm in arm_order(round_no):
            print(f"[{arm}] {calls} call(s), round {round_no + 1}/{rounds}", file=sys.stderr)
            run, got = run_arm(endpoint, arm, made, round_no, config)
            runs.append(run)
            samples.append(got)
    return level(calls, runs, samples, config) | {"call_shape": call_shape(made_all, config)}


def call_shape(calls: Sequence[Call], config: BenchConfig) -> dict[str, Any]:
    """How much each channel spoke, and how much the parties overlapped, in the calls sent."""
    shares = [speech_share(c, ch, config.duration_s) for c in calls for ch in range(2)]
    turns = [t for c in calls for t in c.turns]
    return {
        "speech_share_min": round(min(shares), 3),
        "speech_share_mean": round(sum(shares) / len(shares), 3),
        "speech_share_max": round(max(shares), 3),
        "turns": len(turns),
        "overlapping_s_per_call": round(sum(overlap_ms(c) for c in calls) / 1000 / len(calls), 1),
    }
