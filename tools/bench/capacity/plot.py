"""The capacity plot: latency percentiles against streams, one line style per server."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools.bench.capacity.config import Criteria
from tools.bench.capacity.latency import judged_final_latency
from tools.bench.capacity.report import TargetReport
from tools.bench.common.plot import panels


def plot(reports: Sequence[TargetReport], criteria: Criteria, out: Path) -> None:
    """Latency percentiles against streams: the first server solid, the baseline dashed."""
    with panels(out) as (left, right):
        draw(reports, criteria, left, right)


def draw(reports: Sequence[TargetReport], criteria: Criteria, left: Any, right: Any) -> None:
    """Final latency on the left, partial timing on the right, each with its bound."""
    for index, report in enumerate(reports):
        runs = sorted(report.runs, key=lambda r: r.streams)
        xs = [r.streams for r in runs]
        style: dict[str, Any] = {"linestyle": ("-", "--", ":", "-.")[index % 4]}
        if index:
            style["markerfacecolor"] = "none"
        name = report.name + (f" (capacity {report.capacity})" if report.capacity else "")
        for key, color in (("p50", "tab:blue"), ("p95", "tab:orange"), ("p99", "tab:red")):
            ys = [getattr(judged_final_latency(r.latency), key) for r in runs]
            left.plot(xs, ys, color=color, marker="o", label=f"{name} {key}", **style)
        gaps = [r.latency.partial_interval_ms.p95 for r in runs]
        first = [r.latency.first_partial_ms.p95 for r in runs]
        right.plot(xs, gaps, color="tab:green", marker="o", label=f"{name} gap p95", **style)
        right.plot(xs, first, color="tab:purple", marker="s", label=f"{name} first p95", **style)
    left.axhline(criteria.max_final_latency_ms, color="grey", linewidth=0.8)
    right.axhline(criteria.max_partial_interval_ms, color="grey", linewidth=0.8)
    left.set(xlabel="live streams", ylabel="ms", title="final latency after the VAD's end-silence")
    right.set(xlabel="live streams", ylabel="ms", title="partial interval and first partial")
    for ax in (left, right):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
