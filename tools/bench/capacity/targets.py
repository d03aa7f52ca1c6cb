"""The servers under test: spawned or reached by URL, each with its runs by stream count."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tools.bench.capacity.config import BenchConfig
from tools.bench.capacity.corpus import Clip
from tools.bench.capacity.report import TargetReport, print_run
from tools.bench.capacity.run import RunResult, run_once
from tools.bench.capacity.scrape import Endpoint, stats_end_silence
from tools.bench.capacity.search import interleave_searches
from tools.bench.common.proc_cpu import ProcessWatch
from tools.bench.common.rounds import in_turn
from tools.spawn import ServerSpec, SpawnedServer, spawn
from tools.stats import Stats


@dataclass(frozen=True, slots=True)
class Target:
    """A server to measure: a URL, or a server to spawn."""

    name: str
    url: str | None = None
    spec: ServerSpec | None = None
    http_url: str | None = None  # /stats and /metrics, when not on the WebSocket's port
    # Processes the benchmark started for this server (an engine of its own): (pid, role),
    # their CPU counted with the server's.
    beside: tuple[tuple[int, str], ...] = ()

    @property
    def command(self) -> tuple[str, ...] | None:
        return self.spec.command if self.spec is not None else None


@dataclass(frozen=True, slots=True)
class Search:
    """Which stream counts to run: a list, or a capacity search from the smallest."""

    streams: tuple[int, ...]
    find_capacity: bool
    max_streams: int
    api_key: str | None = None
    # Reverse the servers' order every other round (else always as given).
    alternate: bool = False


def server_spec(
    model: str, server_args: Sequence[str], config: BenchConfig, max_streams: int, timeout_s: float
) -> ServerSpec:
    """The spawned server's options; `server_args` come last, so they win.

    Every benchmark client comes from 127.0.0.1, so the session caps are lifted to the
    largest N the benchmark will try.
    """
    args = (
        *("--model", model),
        *("--end-silence-ms", str(config.end_silence_ms)),
        *("--partial-interval-ms", str(config.partial_interval_ms)),
        *("--max-sessions", str(max_streams)),
        *("--max-sessions-per-ip", str(max_streams)),
        *server_args,
    )
    return ServerSpec(args, start_timeout_s=timeout_s)


def option_value(args: Sequence[str], flag: str) -> str | None:
    """The last value given for `flag` (as `--flag V` or `--flag=V`) in an argument list."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def resolve_end_silence(
    stats: Stats | None, target: Target, config: BenchConfig
) -> tuple[int, str]:
    """End-silence to subtract: /stats if it says, else the spawn command, else the flag."""
    exposed = stats_end_silence(stats)
    if exposed is not None:
        return exposed, "stats"
    if target.command is not None:
        value = option_value(target.command, "--end-silence-ms")
        if value is not None:
            return int(value), "server command line"
    return config.end_silence_ms, "--end-silence-ms"


class LiveTarget:
    """A server being measured: spawned if asked, its runs by stream count."""

    def __init__(
        self, target: Target, pool: Sequence[Clip], config: BenchConfig, api_key: str | None
    ) -> None:
        self.target = target
        self.pool = pool
        self.results: dict[int, RunResult] = {}
        self.spawned: SpawnedServer | None = None
        if target.spec is not None:
            print(f"[{target.name}] starting: {' '.join(target.spec.command)}", file=sys.stderr)
            self.spawned = spawn(target.spec)
        self.url = self.spawned.url if self.spawned is not None else target.url or ""
        # Only a server spawned here has processes on this host to read.
        self.watch = (
            ProcessWatch(self.spawned.proc.pid, target.beside) if self.spawned is not None else None
        )
        self.endpoint = Endpoint.of(self.url, target.http_url, api_key)
        self.stats = self.endpoint.stats()
        if self.stats is None:
            print(f"[{target.name}] no /stats at {self.endpoint.http_url}", file=sys.stderr)
        self.end_silence, self.source = resolve_end_silence(self.stats, target, config)
        self.config = replace(config, end_silence_ms=self.end_silence)

    def passes(self, n: int) -> bool:
        if n not in self.results:
            name, seconds = self.target.name, self.config.duration_s
            print(f"[{name}] {n} stream(s) for {seconds:g} s", file=sys.stderr)
            self.results[n] = run_once(self.endpoint, n, self.pool, self.config, self.watch)
            print_run(self.results[n])
        return self.results[n].passed

    def close(self) -> None:
        if self.spawned is not None:
            self.spawned.stop()

    def report(self, capacity: int | None, max_streams: int) -> TargetReport:
        runs = [self.results[k] for k in sorted(self.results)]
        passing = [r.streams for r in runs if r.passed]
        return TargetReport(
            name=self.target.name,
            url=self.url,
            command=self.target.command,
            engine=(self.stats or {}).get("engine"),
            end_silence_ms=self.end_silence,
            end_silence_source=self.source,
            runs=tuple(runs),
            capacity=capacity,
            capacity_at_limit=capacity is not None and capacity >= max_streams,
            largest_passing_streams=max(passing, default=0),
        )


def measure_targets(
    targets: Sequence[Target], pool: Sequence[Clip], config: BenchConfig, search: Search
) -> list[TargetReport]:
    """Start every server (one after another, so their start-up tuning does not overlap),
    then run the stream counts or the capacity searches, the servers taking turns."""
    live: list[LiveTarget] = []
    try:
        for target in targets:
            live.append(LiveTarget(target, pool, config, search.api_key))
        checks = [t.passes for t in live]
        capacities: list[int | None] = [None] * len(live)
        if search.find_capacity:
            start = min(search.streams)
            found = interleave_searches(checks, start, search.max_streams, search.alternate)
            capacities = list(found)
        else:
            for round_no, n in enumerate(search.streams):
                for check in in_turn(checks, round_no) if search.alternate else checks:
                    check(n)
    finally:
        for t in live:
            t.close()
    return [t.report(c, search.max_streams) for t, c in zip(live, capacities, strict=True)]
