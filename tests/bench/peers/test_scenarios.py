"""The scenarios both engines run: batching, timing and what a worker reports."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from tools.bench.peers import scenarios

SR = scenarios.SAMPLE_RATE


def clips(*seconds: float) -> list[np.ndarray]:
    return [np.full(int(s * SR), i, np.float32) for i, s in enumerate(seconds)]


def test_batches_keep_arrival_order_unless_sorted_by_length() -> None:
    data = clips(3, 1, 2, 5, 4)
    plain = scenarios.groups(data, 2, by_length=False)
    assert [[int(c[0]) for c in b] for b in plain] == [[0, 1], [2, 3], [4]]
    ordered = scenarios.groups(data, 2, by_length=True)
    assert [[int(c[0]) for c in b] for b in ordered] == [[1, 2], [0, 4], [3]]


class CostlyDecoder:
    """A decoder that takes a declared time per batch plus per padded second."""

    def __init__(self, per_batch_s: float, per_padded_s: float) -> None:
        self.per_batch_s, self.per_padded_s = per_batch_s, per_padded_s
        self.batches: list[int] = []

    def __call__(self, batch: list[np.ndarray]) -> list[str]:
        self.batches.append(len(batch))
        padded = len(batch) * max(len(c) for c in batch) / SR
        time.sleep(self.per_batch_s + self.per_padded_s * padded)
        return [f"clip {int(c[0])}" for c in batch]


def test_sorted_batches_pay_less_padding_and_the_rate_says_so() -> None:
    data = clips(*([0.5, 4.0] * 4))
    rates = {}
    for name in ("batch4", "batch4_sorted"):
        decoder = CostlyDecoder(0.0, 0.01)
        result = scenarios.run(decoder, data, name)
        assert decoder.batches == [4, 4, 4]  # the warm-up batch, then the two batches
        assert result["audio_s"] == pytest.approx(18.0)
        rates[name] = result["audio_s_per_s"]
    assert rates["batch4_sorted"] > 1.3 * rates["batch4"]


def test_latency_decodes_ten_seconds_alone_and_takes_the_median() -> None:
    decoder = CostlyDecoder(0.01, 0.0)
    result = scenarios.run(decoder, clips(4, 4, 4), "latency")
    assert decoder.batches == [1] * (1 + scenarios.LATENCY_RUNS)
    assert 0.01 <= result["latency_s"] < 0.05
    assert result["texts"] == ["clip 0"]


def test_a_worker_reports_one_json_line_with_its_peak_rss(
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenarios.report({"wall_s": 1.0}, load_s=0.5)
    line = json.loads(capsys.readouterr().out)
    assert line["load_s"] == 0.5 and line["peak_rss_bytes"] > 10 * 2**20


def test_a_workers_peak_rss_is_its_own_not_its_parents(tmp_path: Path) -> None:
    import subprocess
    import sys

    ballast = np.ones(300 * 2**20 // 8)  # the parent holds 300 MB more than the child
    code = "from tools.bench.peers.scenarios import peak_rss_bytes; print(peak_rss_bytes())"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(child.stdout) < scenarios.peak_rss_bytes() - 200 * 2**20
    assert ballast.sum() > 0
