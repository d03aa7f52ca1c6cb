"""Alternating rounds: each scenario in a fresh process per system, on a quiet machine.

Round r runs every scenario for both systems, the order of the two flipped every round,
so drift in the machine's speed (other tenants, heat) falls on both alike; the report
takes each metric's median over rounds.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.bench.common.rounds import in_turn
from tools.bench.common.stats import medians_by


@dataclass(frozen=True, slots=True)
class System:
    """How to start one scenario's worker for a system."""

    name: str
    command: tuple[str, ...]  # everything but `--scenario NAME`


def busy_share(stat: Path = Path("/proc/stat"), window_s: float = 1.0) -> float:
    """The share of all CPUs' time that was busy over `window_s`."""

    def sample() -> tuple[int, int]:
        fields = [int(v) for v in stat.read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields), idle

    total0, idle0 = sample()
    time.sleep(window_s)
    total1, idle1 = sample()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def wait_quiet(
    busy: Callable[[], float] = busy_share, under: float = 0.1, deadline_s: float = 120.0
) -> float:
    """Block until the machine's busy share is under `under` (or the deadline); its last."""
    end = time.monotonic() + deadline_s
    share = busy()
    while share >= under and time.monotonic() < end:
        share = busy()
    return share


def run_worker(
    system: System, scenario: str, cwd: Path, timeout_s: float = 900.0
) -> dict[str, Any]:
    """One scenario in a fresh process; its last stdout line is the JSON result."""
    command = [*system.command, "--scenario", scenario]
    done = subprocess.run(
        command, check=False, cwd=cwd, capture_output=True, text=True, timeout=timeout_s
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{system.name} {scenario} failed ({done.returncode}): {done.stderr[-2000:]}"
        )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


Runner = Callable[[System, str], dict[str, Any]]


def run_rounds(
    systems: Sequence[System],
    scenarios: Sequence[str],
    rounds: int,
    runner: Runner,
    quiet: Callable[[], float] = wait_quiet,
) -> list[dict[str, Any]]:
    """Every (round, scenario, system) result in the order run, with the busy share seen
    just before it started."""
    results = []
    for number in range(rounds):
        for scenario in scenarios:
            for system in in_turn(systems, number):
                before = quiet()
                result = runner(system, scenario)
                results.append(
                    {"round": number, "scenario": scenario, "system": system.name}
                    | {"busy_before": round(before, 3)}
                    | result
                )
    return results


METRICS = ("latency_s", "audio_s_per_s", "peak_rss_bytes", "load_s")


def medians(results: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """scenario -> system -> metric -> median over rounds."""
    return medians_by(results, ("scenario", "system"), METRICS)


def ratios(table: dict[str, dict[str, dict[str, float]]], ours: str, peer: str) -> dict[str, float]:
    """Our advantage per scenario: >1 means ours is ahead (faster, or less memory)."""
    out = {}
    for scenario, systems in table.items():
        a, b = systems.get(ours, {}), systems.get(peer, {})
        if "latency_s" in a and "latency_s" in b:
            out[f"{scenario}_speed"] = b["latency_s"] / a["latency_s"]
        if "audio_s_per_s" in a and "audio_s_per_s" in b:
            out[f"{scenario}_speed"] = a["audio_s_per_s"] / b["audio_s_per_s"]
        if "peak_rss_bytes" in a and "peak_rss_bytes" in b:
            out[f"{scenario}_memory"] = b["peak_rss_bytes"] / a["peak_rss_bytes"]
    return {k: round(v, 3) for k, v in out.items()}
