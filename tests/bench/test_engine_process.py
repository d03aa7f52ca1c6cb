"""The engine-process benchmark's summary: medians over rounds, per arm."""

from __future__ import annotations

from typing import Any

from tools.bench.engine_process import ARMS, ratios


def run(target: str, lone_ms: float, rate: float) -> dict[str, Any]:
    return {
        "target": target,
        "serial_4s_final": {"p50_ms": lone_ms},
        "burst": {"audio_s_per_s": rate},
    }


def test_the_ratios_compare_each_arms_median_over_rounds() -> None:
    local, remote = ARMS
    runs = [
        run(local, 100.0, 50.0),
        run(remote, 104.0, 45.0),
        run(remote, 110.0, 40.0),
        run(local, 102.0, 50.0),
        run(local, 500.0, 10.0),  # an outlier round: the median ignores it
        run(remote, 106.0, 45.0),
    ]
    assert ratios(runs) == {
        "lone_final_p50_added_ms": 4.0,
        "throughput_engine_process_over_in_process": 0.9,
    }
