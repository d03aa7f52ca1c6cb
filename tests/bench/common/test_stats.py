"""The benchmarks' shared statistics: both percentile conventions, summaries and medians."""

from __future__ import annotations

import numpy as np
import pytest

from tools.bench.common.stats import (
    Percentiles,
    medians_by,
    nearest_rank,
    percentile,
    percentiles,
    spread,
)


def test_nearest_rank_is_always_one_of_the_values() -> None:
    values = [float(v) for v in range(20, 0, -1)]  # any order
    assert nearest_rank(values, 95) == 19.0  # ceil(0.95 * 20) = 19th smallest
    assert nearest_rank(values, 50) == 10.0
    assert nearest_rank(values, 100) == 20.0
    assert nearest_rank(values, 0) == 1.0
    assert nearest_rank([7.0], 95) == 7.0
    with pytest.raises(ValueError, match="no values"):
        nearest_rank([], 95)


def test_percentile_interpolates_between_ranks_as_numpy_does() -> None:
    values = [1.0, 2.0, 3.0, 10.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 95) == pytest.approx(float(np.percentile(values, 95)))


def test_percentiles_round_to_the_digits_asked() -> None:
    values = [0.12345, 0.23456, 0.34567]
    assert percentiles(values) == Percentiles(3, 0.2, 0.2, 0.3, 0.3, 0.3)
    fine = percentiles(values, digits=4)
    assert (fine.p50, fine.max, fine.mean) == (0.2346, 0.3457, 0.2346)
    assert percentiles([]) == Percentiles(0)


def test_spread_gives_the_median_the_nearest_rank_p95_and_the_mean() -> None:
    s = spread([float(v) for v in range(20, 0, -1)])
    assert (s.count, s.p50, s.p95, s.mean) == (20, 10.5, 19.0, 10.5)


def test_medians_nest_by_the_fields_in_the_order_first_seen() -> None:
    rows = [
        {"scenario": "b", "system": "x", "speed": 1, "rss": 5},
        {"scenario": "a", "system": "y", "speed": 4},
        {"scenario": "b", "system": "x", "speed": 3, "rss": 7},
        {"scenario": "b", "system": "x", "speed": 2},
    ]
    table = medians_by(rows, ("scenario", "system"), ("speed", "rss"))
    assert list(table) == ["b", "a"]
    assert table["b"]["x"] == {"speed": 2.0, "rss": 6.0}
    assert table["a"] == {"y": {"speed": 4.0}}  # a metric a row lacks is left out
    assert medians_by(rows, ("system",), ("speed",)) == {"x": {"speed": 2.0}, "y": {"speed": 4.0}}
