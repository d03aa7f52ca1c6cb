"""`--workers 1,2,…`: one spawned server per front-end worker count, side by side in one run.

Each arm is the configured server with `--workers N` last (argparse keeps the last value,
so it wins over any default the spawn command gives). The arms take turns, the order
reversed every other round, so drift in this shared machine's speed falls on all alike.
With `--fake-engine-ms-per-s`, one declared-cost fake engine process (`fake_engine`) is
started on a socket in a private folder and every arm attaches to it with
`--engine unix:PATH`: only the front end then costs CPU, and the arms differ only in it.
Per arm the JSON gives capacity, latency at capacity, and the CPU of every process of the
server (read from /proc; the pids from /stats' `processes`, else the spawned pid).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from tools.bench.capacity.fake_engine import FAKE_BACKEND, FAKE_LABEL, READY_LINE, DeclaredCost
from tools.bench.capacity.report import TargetReport
from tools.bench.capacity.run import RunResult
from tools.bench.capacity.targets import Target
from tools.spawn import ServerSpec, SpawnError, start_followed

ENGINE_ROLE = "engine"
FAKE_NOTE = (
    "the fake decodes nothing and answers by loop timers; its process still reads the "
    "socket (the requests' audio), and its CPU is counted under the role `engine`"
)


@dataclass(frozen=True, slots=True)
class ArmPlan:
    """The arms: one per worker count (none: the configured server alone), and the
    declared cost of the fake engine they share (None: each builds its own, a model)."""

    workers: tuple[int, ...] = ()
    fake: DeclaredCost | None = None
    start_timeout_s: float = 60.0


def arm_name(workers: int) -> str:
    return f"workers={workers}"


class FakeEngineProcess:
    """`python -m tools.bench.capacity.fake_engine` on a socket in a private folder."""

    def __init__(self, cost: DeclaredCost, start_timeout_s: float = 60.0) -> None:
        self.cost = cost
        self.folder = tempfile.mkdtemp(prefix="ss-fake-")  # 0700: only this user reaches it
        self.path = str(Path(self.folder) / "e.sock")
        command = (
            *(sys.executable, "-m", "tools.bench.capacity.fake_engine", "--socket", self.path),
            *("--fixed-ms", f"{cost.fixed_ms:g}"),
            *("--cost-ms-per-audio-s", f"{cost.ms_per_audio_s:g}"),
        )
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            self.proc, self.output = start_followed(command, env=env)
        except (OSError, SpawnError):
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        if self.output.wait_for(re.escape(READY_LINE), start_timeout_s) is None:
            self.stop()
            raise SpawnError(f"the fake engine did not listen:\n{self.output.tail()}")

    @property
    def url(self) -> str:
        return f"unix:{self.path}"

    @property
    def beside(self) -> tuple[tuple[int, str], ...]:
        """(pid, role) for a target's watch: its CPU counts with the server's."""
        return ((self.proc.pid, ENGINE_ROLE),)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.output.join(timeout_s=5.0)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> FakeEngineProcess:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def attached(spec: ServerSpec, engine: FakeEngineProcess | None) -> ServerSpec:
    """`spec` attached to the fake engine (`--engine` last, so it wins), if there is one."""
    return spec if engine is None else replace(spec, args=(*spec.args, "--engine", engine.url))


def arm_targets(
    spec: ServerSpec, workers: Sequence[int], engine: FakeEngineProcess | None
) -> list[Target]:
    """One target per worker count: `spec` (on the fake engine, if any) with `--workers N`
    last, so that it wins over any `--workers` before it."""
    base = attached(spec, engine)
    beside = engine.beside if engine is not None else ()
    return [
        Target(
            arm_name(n), spec=replace(base, args=(*base.args, "--workers", str(n))), beside=beside
        )
        for n in workers
    ]


def engine_label(engine: dict[str, Any] | None) -> str:
    """What answered an arm, from its /stats `engine` report."""
    if engine is None:
        return "unknown (no /stats engine report)"
    if engine.get("backend") == FAKE_BACKEND:
        return FAKE_LABEL
    return f"model {engine.get('model')} ({engine.get('backend')})"


def summarised_run(report: TargetReport) -> RunResult | None:
    """The run an arm is summed up by: at its capacity (the largest passing N), else its
    smallest run (none passed), else None (no run)."""
    passing = [r for r in report.runs if r.passed]
    if passing:
        return max(passing, key=lambda r: r.streams)
    return min(report.runs, key=lambda r: r.streams, default=None)


def capacity_of(report: TargetReport) -> int | None:
    """Capacity when searched, else the largest passing N (what the ratios compare)."""
    return report.capacity if report.capacity is not None else report.largest_passing_streams


def arm_summary(report: TargetReport, workers: int | None, first: TargetReport) -> dict[str, Any]:
    """One arm's line of the JSON: capacity and its ratio to the first arm's, and the
    latency and CPU of the run at capacity."""
    run = summarised_run(report)
    mine, theirs = capacity_of(report), capacity_of(first)
    cpu = run.server_cpu if run is not None else None
    return {
        "name": report.name,
        "workers": workers,
        "engine": engine_label(report.engine),
        "capacity": report.capacity,
        "capacity_at_limit": report.capacity_at_limit,
        "largest_passing_streams": report.largest_passing_streams,
        "capacity_ratio_to_first": round(mine / theirs, 2) if mine is not None and theirs else None,
        "at_streams": run.streams if run is not None else None,
        "passed": run.passed if run is not None else None,
        "final_after_vad_p95_ms": run.latency.final_after_vad_ms.p95 if run else None,
        "partial_gap_p95_ms": run.latency.partial_interval_ms.p95 if run else None,
        "server_cpu": asdict(cpu) if cpu is not None else None,
        "server_cpu_ms_per_stream_second": cpu_per_stream_second(run),
    }


def cpu_per_stream_second(run: RunResult | None) -> float | None:
    """The server's own processes' CPU milliseconds per second of one live stream."""
    if run is None or run.server_cpu is None or not run.streams:
        return None
    return round(1000 * run.server_cpu.cpu_s / (run.streams * run.duration_s), 3)


def workers_section(reports: Sequence[TargetReport], plan: ArmPlan) -> dict[str, Any]:
    """The JSON's `workers`: the engine the arms used, and one summary per arm (without
    --workers, one per server, its worker count unknown)."""
    engine: dict[str, Any] = {"label": "the model, built by each server (or its engine)"}
    if plan.fake is not None:
        engine = {"label": FAKE_LABEL, "note": FAKE_NOTE} | asdict(plan.fake)
    by_name = {r.name: r for r in reports}
    arms: list[tuple[TargetReport, int | None]] = [(r, None) for r in reports]
    if plan.workers:
        arms = [(by_name[arm_name(n)], n) for n in plan.workers if arm_name(n) in by_name]
    return {
        "engine": engine,
        "order": "arms take turns, the order reversed every other round",
        "cpu": "utime+stime from /proc/PID/stat over each run's window; 100% = one core",
        "arms": [arm_summary(r, n, arms[0][0]) for r, n in arms],
    }
