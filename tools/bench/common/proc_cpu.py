"""CPU time of processes on this host, from /proc/PID/stat: what each spent over a window.

utime + stime (fields 14 and 15, in clock ticks) of each process itself, its reaped
children left out: a supervisor's workers are listed and read one by one instead.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, proc: Path = Path("/proc")) -> float | None:
    """User plus system CPU seconds `pid` has spent so far (None: no such process)."""
    try:
        text = (proc / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces or ")".
    fields = text[text.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of the whole line
    return (utime + stime) / CLOCK_TICKS


@dataclass(frozen=True, slots=True)
class ProcessCpu:
    """One process's CPU over a window (None: it was gone by the window's end)."""

    pid: int
    role: str
    cpu_s: float | None
    cpu_percent: float | None  # 100 = one core


@dataclass(frozen=True, slots=True)
class WindowCpu:
    """Every watched process's CPU over one window, summed and by role."""

    window_s: float
    processes: tuple[ProcessCpu, ...]
    cpu_s: float
    cpu_percent: float
    cpu_s_by_role: dict[str, float]


@dataclass(frozen=True, slots=True)
class CpuWindow:
    """Processes' CPU readings at the start of a window; `end` reads them again."""

    roles: Mapping[int, str]
    started_cpu: Mapping[int, float]
    started_at: float

    @classmethod
    def begin(cls, roles: Mapping[int, str]) -> CpuWindow:
        readings = {pid: cpu_seconds(pid) for pid in roles}
        started = {pid: cpu for pid, cpu in readings.items() if cpu is not None}
        return cls(dict(roles), started, time.monotonic())

    def end(self) -> WindowCpu:
        wall = max(time.monotonic() - self.started_at, 1e-9)
        rows = [self._row(pid, role, wall) for pid, role in self.roles.items()]
        total = sum(r.cpu_s for r in rows if r.cpu_s is not None)
        by_role: dict[str, float] = {}
        for r in rows:
            by_role[r.role] = round(by_role.get(r.role, 0.0) + (r.cpu_s or 0.0), 3)
        return WindowCpu(
            window_s=round(wall, 3),
            processes=tuple(rows),
            cpu_s=round(total, 3),
            cpu_percent=round(100 * total / wall, 1),
            cpu_s_by_role=by_role,
        )

    def _row(self, pid: int, role: str, wall: float) -> ProcessCpu:
        before, after = self.started_cpu.get(pid), cpu_seconds(pid)
        if before is None or after is None:
            return ProcessCpu(pid, role, None, None)
        spent = after - before
        return ProcessCpu(pid, role, round(spent, 3), round(100 * spent / wall, 1))


@dataclass(frozen=True, slots=True)
class ProcessWatch:
    """Whose CPU a run's window reads: the processes a server lists of itself, else the
    one process the benchmark spawned (`pid`), and any it started `beside` the server
    (an engine process of its own) that the server does not list already."""

    pid: int
    beside: tuple[tuple[int, str], ...] = ()  # (pid, role)

    def roles(self, listed: Mapping[int, str]) -> dict[int, str]:
        roles = dict(listed) or {self.pid: "server"}
        for pid, role in self.beside:
            roles.setdefault(pid, role)
        return roles

    def begin(self, listed: Mapping[int, str]) -> CpuWindow:
        return CpuWindow.begin(self.roles(listed))
