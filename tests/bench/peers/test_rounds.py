"""Alternating rounds, waiting for quiet, and the medians and ratios the report gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tools.bench.peers.rounds import System, medians, ratios, run_rounds, wait_quiet

OURS, PEER = System("ours", ("ours",)), System("sherpa", ("sherpa",))


def test_rounds_flip_the_systems_order_and_run_every_scenario() -> None:
    ran: list[tuple[str, str]] = []

    def runner(system: System, scenario: str) -> dict[str, Any]:
        ran.append((system.name, scenario))
        return {"audio_s_per_s": 1.0}

    results = run_rounds([OURS, PEER], ["a", "b"], 2, runner, quiet=lambda: 0.0)
    assert ran == [
        ("ours", "a"), ("sherpa", "a"), ("ours", "b"), ("sherpa", "b"),
        ("sherpa", "a"), ("ours", "a"), ("sherpa", "b"), ("ours", "b"),
    ]  # fmt: skip
    assert [r["round"] for r in results] == [0] * 4 + [1] * 4


def test_medians_and_ratios_favour_the_faster_and_leaner_system() -> None:
    speeds = {"ours": iter([40.0, 60.0, 50.0]), "sherpa": iter([40.0, 41.0, 39.0])}
    rss = {"ours": 500, "sherpa": 1000}

    def runner(system: System, scenario: str) -> dict[str, Any]:
        if scenario == "latency":
            return {"latency_s": 0.2 if system.name == "ours" else 0.3}
        return {"audio_s_per_s": next(speeds[system.name]), "peak_rss_bytes": rss[system.name]}

    table = medians(run_rounds([OURS, PEER], ["latency", "batch8"], 3, runner, lambda: 0.0))
    assert table["batch8"]["ours"]["audio_s_per_s"] == 50.0
    assert table["batch8"]["sherpa"]["audio_s_per_s"] == 40.0
    found = ratios(table, "ours", "sherpa")
    assert found == {"latency_speed": 1.5, "batch8_speed": 1.25, "batch8_memory": 2.0}


def test_waiting_for_quiet_returns_once_the_machine_calms_down() -> None:
    readings = iter([0.9, 0.5, 0.05, 0.9])
    assert wait_quiet(lambda: next(readings), under=0.1, deadline_s=10) == 0.05


def test_waiting_for_quiet_gives_up_at_its_deadline() -> None:
    assert wait_quiet(lambda: 0.9, under=0.1, deadline_s=0.0) == 0.9


def test_a_failed_worker_is_an_error_that_names_it(tmp_path: Path) -> None:
    from tools.bench.peers.rounds import run_worker

    broken = System("sherpa", ("python3", "-c", "import sys; sys.exit('no model')"))
    with pytest.raises(RuntimeError, match=r"sherpa latency failed.*no model"):
        run_worker(broken, "latency", tmp_path)
