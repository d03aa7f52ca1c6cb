"""The supervisor's one /metrics: every process's exposition merged, labelled by process."""

from __future__ import annotations

import pytest
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    Summary,
    generate_latest,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from server.host.exposition import SCRAPE_OK, Exposition, merge

WORKER_0 = {"process": "worker", "worker": "0"}
WORKER_1 = {"process": "worker", "worker": "1"}
ENGINE_0 = {"process": "engine", "engine": "0"}

Series = tuple[str, frozenset[tuple[str, str]]]


def _families(data: bytes) -> dict[str, Metric]:
    """The merged text read back, by family name; a name twice would be two HELP/TYPE blocks."""
    families = list(text_string_to_metric_families(data.decode()))
    names = [family.name for family in families]
    assert len(names) == len(set(names)), names
    return {family.name: family for family in families}


def _values(family: Metric) -> dict[Series, float]:
    return {(s.name, frozenset(s.labels.items())): s.value for s in family.samples}


def _series(name: str, /, **labels: str) -> Series:
    return name, frozenset(labels.items())


def _worker(requests: dict[str, int], in_flight: float, latencies: list[float]) -> str:
    """A worker's own registry, as it would expose it."""
    registry = CollectorRegistry()
    counter = Counter("requests", "Requests served", ["route"], registry=registry)
    for route, count in requests.items():
        counter.labels(route).inc(count)
    Gauge("in_flight", "Requests in flight", registry=registry).set(in_flight)
    histogram = Histogram("latency_seconds", "Latency", buckets=(0.1, 1.0), registry=registry)
    for latency in latencies:
        histogram.observe(latency)
    return generate_latest(registry).decode()


def test_each_process_series_is_labelled_in_one_family_per_name() -> None:
    merged = _families(
        merge(
            [
                Exposition(WORKER_0, _worker({"/a": 2, "/b": 1}, 3, [0.05])),
                Exposition(WORKER_1, _worker({"/a": 5}, 0, [])),
            ]
        )
    )
    # The parser gives a counter's family without `_total`, its samples with it.
    requests = merged["requests"]
    assert (requests.type, requests.documentation) == ("counter", "Requests served")
    assert _values(requests) == {
        _series("requests_total", route="/a", **WORKER_0): 2.0,
        _series("requests_total", route="/b", **WORKER_0): 1.0,
        _series("requests_total", route="/a", **WORKER_1): 5.0,
    }
    assert _values(merged["in_flight"]) == {
        _series("in_flight", **WORKER_0): 3.0,
        _series("in_flight", **WORKER_1): 0.0,
    }
    # Each series' `_created` keeps its own family, labelled like the series.
    created = merged["requests_created"]
    assert created.type == "gauge"
    assert {s.labels["worker"] for s in created.samples} == {"0", "1"}
    assert len(created.samples) == 3


def test_histogram_buckets_sum_and_count_survive_per_process() -> None:
    merged = _families(
        merge(
            [
                Exposition(WORKER_0, _worker({}, 0, [0.05, 0.5, 5.0])),
                Exposition(ENGINE_0, _worker({}, 0, [0.5])),
            ]
        )
    )
    latency = merged["latency_seconds"]
    assert latency.type == "histogram"
    values = _values(latency)
    assert values == {
        _series("latency_seconds_bucket", le="0.1", **WORKER_0): 1.0,
        _series("latency_seconds_bucket", le="1.0", **WORKER_0): 2.0,
        _series("latency_seconds_bucket", le="+Inf", **WORKER_0): 3.0,
        _series("latency_seconds_count", **WORKER_0): 3.0,
        _series("latency_seconds_sum", **WORKER_0): pytest.approx(5.55),
        _series("latency_seconds_bucket", le="0.1", **ENGINE_0): 0.0,
        _series("latency_seconds_bucket", le="1.0", **ENGINE_0): 1.0,
        _series("latency_seconds_bucket", le="+Inf", **ENGINE_0): 1.0,
        _series("latency_seconds_count", **ENGINE_0): 1.0,
        _series("latency_seconds_sum", **ENGINE_0): 0.5,
    }
    assert len(merged["latency_seconds_created"].samples) == 2


def test_summaries_infos_and_untyped_metrics_survive() -> None:
    registry = CollectorRegistry()
    Summary("decode_seconds", "Decode time", registry=registry).observe(2.0)
    Info("build", "Build", registry=registry).info({"version": "1.2"})
    untyped = "# HELP queue_depth Depth\n# TYPE queue_depth untyped\nqueue_depth 7\n"
    merged = _families(
        merge(
            [
                Exposition(ENGINE_0, generate_latest(registry).decode()),
                Exposition(WORKER_0, untyped),
            ]
        )
    )
    assert merged["decode_seconds"].type == "summary"
    assert _values(merged["decode_seconds"]) == {
        _series("decode_seconds_count", **ENGINE_0): 1.0,
        _series("decode_seconds_sum", **ENGINE_0): 2.0,
    }
    assert _values(merged["build_info"]) == {
        _series("build_info", version="1.2", **ENGINE_0): 1.0,
    }
    assert merged["queue_depth"].type == "unknown"  # the parser's name for untyped
    assert _values(merged["queue_depth"]) == {_series("queue_depth", **WORKER_0): 7.0}


def test_own_exposition_keeps_its_labels_as_they_are() -> None:
    registry = CollectorRegistry()
    Gauge("workers", "Workers up", ["pool"], registry=registry).labels("main").set(2)
    own = generate_latest(registry).decode()
    merged = _families(
        merge([Exposition({}, own), Exposition(WORKER_0, _worker({"/a": 1}, 0, []))])
    )
    assert _values(merged["workers"]) == {_series("workers", pool="main"): 2.0}
    assert _values(merged[SCRAPE_OK]) == {
        _series(SCRAPE_OK): 1.0,
        _series(SCRAPE_OK, **WORKER_0): 1.0,
    }


def test_a_label_the_process_also_sets_is_kept_as_exported() -> None:
    registry = CollectorRegistry()
    gauge = Gauge("slots", "Slots", ["worker", "exported_worker"], registry=registry)
    gauge.labels("7", "8").set(1)
    Gauge("jobs", "Jobs", ["worker"], registry=registry).labels("9").set(4)
    merged = _families(merge([Exposition(WORKER_0, generate_latest(registry).decode())]))
    assert _values(merged["jobs"]) == {
        _series("jobs", exported_worker="9", **WORKER_0): 4.0,
    }
    # `exported_worker` taken too: prefixed again, as Prometheus does; no value is lost.
    assert _values(merged["slots"]) == {
        _series("slots", exported_worker="8", exported_exported_worker="7", **WORKER_0): 1.0,
    }


def test_a_garbled_part_is_left_out_whole_and_marked_not_ok() -> None:
    good = _worker({"/a": 1}, 1, [])
    # Valid families first, then a broken line: none of it may reach the merge.
    garbled = _worker({"/b": 4}, 9, []) + 'broken{route="/x" 1\n'
    merged = _families(merge([Exposition(WORKER_0, good), Exposition(WORKER_1, garbled)]))
    assert _values(merged[SCRAPE_OK]) == {
        _series(SCRAPE_OK, **WORKER_0): 1.0,
        _series(SCRAPE_OK, **WORKER_1): 0.0,
    }
    assert _values(merged["requests"]) == {
        _series("requests_total", route="/a", **WORKER_0): 1.0,
    }
    assert _values(merged["in_flight"]) == {_series("in_flight", **WORKER_0): 1.0}
    assert "broken" not in merged


def test_no_parts_give_an_empty_exposition() -> None:
    assert merge([]) == b""
    assert _families(merge([])) == {}


def test_a_family_whose_type_disagrees_is_left_out_for_that_process() -> None:
    as_gauge = CollectorRegistry()
    Gauge("in_flight", "Requests in flight", registry=as_gauge).set(5)
    as_histogram = CollectorRegistry()
    Histogram("in_flight", "Requests in flight", registry=as_histogram).observe(1)
    merged = _families(
        merge(
            [
                Exposition(WORKER_0, generate_latest(as_gauge).decode()),
                Exposition(WORKER_1, generate_latest(as_histogram).decode()),
            ]
        )
    )
    assert merged["in_flight"].type == "gauge"
    assert _values(merged["in_flight"]) == {_series("in_flight", **WORKER_0): 5.0}


def test_parts_named_alike_do_not_repeat_a_series() -> None:
    text = _worker({"/a": 1}, 2, [])
    data = merge([Exposition(WORKER_0, text), Exposition(WORKER_0, text)])
    merged = _families(data)
    assert _values(merged["in_flight"]) == {_series("in_flight", **WORKER_0): 2.0}
    assert data.decode().count('requests_total{process="worker",route="/a",worker="0"}') == 1


def test_label_values_with_quotes_and_newlines_round_trip() -> None:
    registry = CollectorRegistry()
    value = 'a "quoted"\\path\nline'
    Gauge("odd", "Odd", ["name"], registry=registry).labels(value).set(1)
    merged = _families(merge([Exposition({"process": 'w"x'}, generate_latest(registry).decode())]))
    assert _values(merged["odd"]) == {_series("odd", name=value, process='w"x'): 1.0}


@pytest.mark.parametrize("name", ["le", "quantile", "__name__", "0worker", "a-b"])
def test_a_process_cannot_be_named_by_a_reserved_or_invalid_label(name: str) -> None:
    with pytest.raises(ValueError, match="not a label"):
        Exposition({name: "0"}, "")


def test_an_exposition_keeps_its_own_copy_of_the_labels() -> None:
    labels = dict(WORKER_0)
    part = Exposition(labels, _worker({}, 1, []))
    labels["worker"] = "5"
    assert dict(part.labels) == WORKER_0
    assert part == Exposition(WORKER_0, part.text)
    assert hash(part) == hash(Exposition(WORKER_0, part.text))
