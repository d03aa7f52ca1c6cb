"""Percentiles and medians, one definition each.

Two percentile conventions, each kept where results depend on it: `percentile` (linear
between the two nearest ranks, numpy's default) for the latency distributions summed up
as `Percentiles`; `nearest_rank` (the smallest value with at least q% of the sample at or
below it, an actual observation) for the short samples of `spread`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The q-th percentile (0-100), linear between the nearest ranks."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def nearest_rank(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank: always one of the values."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Summary of one latency sample (milliseconds unless named otherwise)."""

    count: int
    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None


def percentiles(values: Sequence[float], digits: int = 1) -> Percentiles:
    """count, mean, p50/p95/p99 (linear) and max, rounded to `digits`."""
    if len(values) == 0:
        return Percentiles(0)
    arr = np.asarray(values, dtype=np.float64)
    p50, p95, p99 = (round(percentile(arr, q), digits) for q in (50, 95, 99))
    return Percentiles(
        len(arr), round(float(arr.mean()), digits), p50, p95, p99, round(float(arr.max()), digits)
    )


@dataclass(frozen=True, slots=True)
class Spread:
    """A short sample: its size, median, nearest-rank p95 and mean."""

    count: int
    p50: float
    p95: float
    mean: float


def spread(values: Iterable[float]) -> Spread:
    """The median, nearest-rank p95 and mean of a non-empty sample."""
    ordered = sorted(values)
    return Spread(
        len(ordered),
        statistics.median(ordered),
        nearest_rank(ordered, 95),
        statistics.fmean(ordered),
    )


def medians_by(
    rows: Iterable[Mapping[str, Any]], by: Sequence[str], metrics: Sequence[str]
) -> dict[str, Any]:
    """Each metric's median over the rows that share their `by` fields, nested by those
    fields in the order first seen (`by=("scenario", "system")`: scenario -> system ->
    metric -> median); a metric a row lacks is left out of its group."""
    table: dict[str, Any] = {}
    for row in rows:
        cell = table
        for key in by:
            cell = cell.setdefault(row[key], {})
        for metric in metrics:
            if metric in row:
                cell.setdefault(metric, []).append(float(row[metric]))
    return _medians(table, len(by))


def _medians(table: dict[str, Any], depth: int) -> dict[str, Any]:
    if depth == 0:
        return {metric: statistics.median(values) for metric, values in table.items()}
    return {key: _medians(inner, depth - 1) for key, inner in table.items()}
