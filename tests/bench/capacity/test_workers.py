"""scripts/bench.py --workers: the arms, the processes whose CPU is read, the JSON, and a
run end to end against a spawned server on the declared-cost fake engine."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from server.config import option_fields
from tools.bench.capacity import cli
from tools.bench.capacity.fake_engine import FAKE_LABEL, DeclaredCost
from tools.bench.capacity.latency import Latency
from tools.bench.capacity.report import TargetReport
from tools.bench.capacity.run import ClientCost, RunResult
from tools.bench.capacity.scrape import server_processes
from tools.bench.capacity.search import interleave_searches
from tools.bench.capacity.server_load import ServerLoad
from tools.bench.capacity.targets import Target, option_value
from tools.bench.capacity.workers import ArmPlan, arm_targets, workers_section
from tools.bench.common.proc_cpu import CpuWindow, ProcessCpu, ProcessWatch, WindowCpu, cpu_seconds
from tools.bench.common.stats import Percentiles
from tools.spawn import ServerSpec

REPO = Path(__file__).resolve().parents[3]


class FakeEngine:
    """Stands in for FakeEngineProcess where only its url and pid matter."""

    url = "unix:/tmp/x/e.sock"
    beside = ((4242, "engine"),)


def targets_of(*flags: str) -> list[Target]:
    args = cli.parse_args(["--spawn-server", "m", *flags])
    return cli.make_targets(args, cli.bench_config(args), FakeEngine())  # type: ignore[arg-type]


def test_one_arm_per_worker_count_attached_to_the_fake_engine_with_workers_last() -> None:
    arms = targets_of("--workers", "1,2,4", "--fake-engine-ms-per-s", "30", "--server-args=--vad x")
    assert [t.name for t in arms] == ["workers=1", "workers=2", "workers=4"]
    for arm, n in zip(arms, (1, 2, 4), strict=True):
        command = arm.command or ()
        assert command[-2:] == ("--workers", str(n))  # last, so argparse keeps it
        assert option_value(command, "--engine") == FakeEngine.url
        assert option_value(command, "--vad") == "x"  # the --server-args are kept
        assert arm.beside == FakeEngine.beside
    # A spawn command that someday passes its own --workers first still runs each arm's.
    spec = ServerSpec(("--workers", "1"))
    again = arm_targets(spec, [2], None)
    assert option_value(again[0].command or (), "--workers") == "2"


def test_a_fake_engine_without_workers_drops_the_baseline() -> None:
    (only,) = targets_of("--fake-engine-ms-per-s", "30")
    assert only.name == "configured"
    assert option_value(only.command or (), "--engine") == FakeEngine.url
    assert option_value(only.command or (), "--max-batch") is None
    args = cli.parse_args(["--spawn-server", "m"])
    plain = cli.make_targets(args, cli.bench_config(args))
    assert [t.name for t in plain] == ["configured", "baseline"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--url", "ws://h:1/ws", "--workers", "1,2"],
        ["--url", "ws://h:1/ws", "--fake-engine-ms-per-s", "10"],
        ["--spawn-server", "m", "--workers", "2,2"],
        ["--spawn-server", "m", "--workers", "1,2", "--server-args", "--workers 3"],
        ["--spawn-server", "m", "--fake-engine-ms-per-s", "5", "--server-args", "--engine x"],
        ["--spawn-server", "m", "--fake-engine-ms-per-s", "-5"],
        ["--spawn-server", "m", "--workers", "0"],
    ],
)
def test_contradictory_arm_flags_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.parse_args(argv)
    assert exited.value.code == 2


def test_the_processes_a_server_lists_and_the_fallback_to_its_own_pid() -> None:
    stats = {
        "processes": {
            "supervisor": 10,
            "engines": [{"pid": 11, "device": "cpu"}],
            "workers": [{"pid": 12, "sessions": 3}, {"pid": 13, "sessions": 0}, {"pid": "x"}],
        }
    }
    listed = server_processes(stats)
    assert listed == {10: "supervisor", 11: "engine", 12: "worker", 13: "worker"}
    assert server_processes({"sessions": 0}) == {}
    assert server_processes({"processes": None}) == {}
    assert server_processes(None) == {}
    watch = ProcessWatch(99, beside=((11, "engine"), (77, "engine")))
    assert watch.roles(listed) == listed | {77: "engine"}  # 11 is listed already
    assert watch.roles({}) == {99: "server", 11: "engine", 77: "engine"}


def test_cpu_seconds_parse_a_stat_line_whose_name_holds_parentheses(tmp_path: Path) -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    fields = ["S", *["0"] * 10, str(3 * ticks), str(ticks), *["0"] * 30]
    (tmp_path / "55").mkdir()
    (tmp_path / "55" / "stat").write_text(f"55 (a) b (c)) {' '.join(fields)}\n")
    assert cpu_seconds(55, tmp_path) == pytest.approx(4.0)
    assert cpu_seconds(56, tmp_path) is None


def test_a_window_reads_what_each_process_spent() -> None:
    window = CpuWindow.begin({os.getpid(): "server", 2**22 + 12345: "worker"})
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:  # spend CPU in this process
        pass
    got = window.end()
    mine, gone = got.processes
    assert mine.cpu_s is not None and mine.cpu_s >= 0.2
    assert gone == ProcessCpu(2**22 + 12345, "worker", None, None)
    assert got.cpu_s == mine.cpu_s
    assert got.cpu_s_by_role == {"server": mine.cpu_s, "worker": 0.0}
    assert got.cpu_percent > 0


def test_alternating_searches_reverse_their_order_every_other_round() -> None:
    order: list[str] = []

    def check(name: str) -> Callable[[int], bool]:
        def passes(n: int) -> bool:
            order.append(name)
            return n <= 8

        return passes

    found = interleave_searches([check("a"), check("b"), check("c")], 1, 64, alternate=True)
    assert found == [8, 8, 8]
    rounds = [order[i : i + 3] for i in range(0, len(order), 3)]
    assert rounds[0] == ["a", "b", "c"]
    assert rounds[1] == ["c", "b", "a"]
    assert rounds[2] == ["a", "b", "c"]


def run_result(streams: int, passed: bool, p95: float, cpu_s: float | None) -> RunResult:
    nothing = Percentiles(0)
    latency = Latency(
        nothing, nothing, nothing, Percentiles(5, 1.0, 1.0, p95), nothing, Percentiles(9, 1, 1, 420)
    )
    load = ServerLoad(None, None, None, None, None, None, None, None, None, None, 0)
    cpu = None
    if cpu_s is not None:
        row = ProcessCpu(1, "worker", cpu_s, 100 * cpu_s / 10)
        cpu = WindowCpu(10.0, (row,), cpu_s, 100 * cpu_s / 10, {"worker": cpu_s})
    return RunResult(
        streams, 10.0, 10.0, 0.5, 1, 1, 1, 1, 0, 0, 0, 0, 0, (), 0, latency,
        ClientCost(0.0, 0.0, 0.0, nothing, "asyncio"), load, passed, (), cpu,
    )  # fmt: skip


def target_report(name: str, capacity: int, runs: tuple[RunResult, ...]) -> TargetReport:
    engine = {"backend": "declared-cost-fake", "model": "fake"}
    return TargetReport(name, "ws://h/ws", None, engine, 500, "stats", runs, capacity, False, 0)


def test_the_workers_section_sums_each_arm_up_at_its_capacity() -> None:
    one = target_report(
        "workers=1", 4, (run_result(4, True, 300.0, 4.0), run_result(8, False, 1500.0, 8.0))
    )
    two = target_report("workers=2", 10, (run_result(10, True, 600.0, 12.0),))
    plan = ArmPlan((1, 2), DeclaredCost(20, 50))
    section = workers_section([one, two], plan)
    assert section["engine"]["label"] == FAKE_LABEL
    assert section["engine"]["ms_per_audio_s"] == 50
    first, second = section["arms"]
    assert (first["workers"], first["capacity"], first["at_streams"]) == (1, 4, 4)
    assert first["final_after_vad_p95_ms"] == 300.0
    assert first["partial_gap_p95_ms"] == 420
    assert first["server_cpu"]["cpu_s"] == 4.0
    assert first["server_cpu_ms_per_stream_second"] == 100.0  # 4 s over 4 streams x 10 s
    assert first["capacity_ratio_to_first"] == 1.0
    assert second["capacity_ratio_to_first"] == 2.5
    assert second["engine"] == FAKE_LABEL
    # An arm whose every run failed is summed up at its smallest run.
    failed = target_report("workers=1", 0, (run_result(2, False, 2000.0, None),))
    (only,) = workers_section([failed], ArmPlan((1,)))["arms"]
    assert (only["at_streams"], only["passed"], only["server_cpu"]) == (2, False, None)
    assert only["capacity_ratio_to_first"] is None


@pytest.mark.skipif(
    "workers" not in option_fields(), reason="python -m server takes no --workers here yet"
)
def test_workers_arms_on_the_fake_engine_end_to_end(tmp_path: Path) -> None:
    """One 2-stream run each of `--workers 1` and `--workers 2`, attached to one fake
    engine: finals come back, the JSON names the fake, and the CPU of every process is
    read apart (the two workers, and the fake engine, which neither server lists)."""
    out = tmp_path / "bench.json"
    argv = [
        *("--spawn-server", "no-model-needed", "--workers", "1,2", "--streams", "2"),
        *("--duration", "5", "--fake-engine-ms-per-s", "20", "--fake-engine-fixed-ms", "30"),
        *("--speech-dir", str(tmp_path / "speech"), "--json", str(out)),
    ]
    assert cli.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["workers"]["engine"]["label"] == FAKE_LABEL
    one, two = report["workers"]["arms"]
    for arm in (one, two):
        assert arm["engine"] == FAKE_LABEL, arm
        assert arm["final_after_vad_p95_ms"] is not None, arm
        (run,) = report["servers"][arm["name"]]["runs"]
        assert run["errors"] == 0 and run["finals"] >= 1, run
        assert arm["server_cpu"]["cpu_s_by_role"]["engine"] >= 0, arm
    assert one["capacity_ratio_to_first"] == 1.0
    roles = [p["role"] for p in two["server_cpu"]["processes"]]
    assert roles.count("worker") == 2, two
    assert roles.count("engine") == 1, two  # the fake, counted once
    assert report["host"]["cpu"]  # the CPU's model and flags, as every capacity run says
