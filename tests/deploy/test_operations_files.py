"""The Prometheus and Grafana files in deploy/ are valid and name only exported metrics."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from engine.remote.metrics import RemoteMetrics
from engine.serving.device_metrics import DeviceMetrics
from engine.serving.metrics import EngineMetrics
from engine.serving.monitor import Monitor
from server.app import ServerMetrics
from tests.server.conftest import ServerProcess

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = REPO / "deploy" / "prometheus"
DASHBOARD = REPO / "deploy" / "grafana" / "sensestream.json"
# Series Prometheus writes itself for every target, not the server.
SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
# PromQL words that look like metric names but are not (functions are caught by the `(`).
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool"}
KEYWORDS |= {"and", "or", "unless", "offset", "inf", "nan"}
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
}


def promtool() -> str:
    """promtool's path, or a failure that says how to get it (not a skip)."""
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: run scripts/system_deps.sh (Debian package prometheus)")
    return path


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # label values and strings
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range durations
    expr = re.sub(r"\$\{?\w+\}?", "", expr)  # Grafana variables such as $__rate_interval
    # Grouping clauses list label names, not metrics.
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    found = re.findall(r"(?<![\w.])([a-zA-Z_:][\w:]*+)(?!\s*\()", expr)
    return {name for name in found if name.lower() not in KEYWORDS}


def dashboard_exprs(text: str) -> list[str]:
    """Every `expr` of the dashboard's panels."""
    return [t["expr"] for p in json.loads(text)["panels"] for t in p.get("targets", [])]


def alert_exprs(text: str) -> list[str]:
    """Every rule's `expr` in a rules file."""
    return [r["expr"] for g in yaml.safe_load(text)["groups"] for r in g["rules"]]


def unknown_names(exprs: Iterable[str], known: set[str]) -> set[str]:
    """The metric names the expressions read that no one exports."""
    return {name for e in exprs for name in metric_names(e)} - known - SYNTHETIC


def sample_names(registry: CollectorRegistry) -> set[str]:
    """Every sample name a registry's metrics can write, labelled children or not."""
    names: set[str] = set()
    for family in registry.collect():
        ends = SUFFIXES.get(family.type, ("",))
        names |= {family.name + end for end in ends}
    return names


def defined_names() -> set[str]:
    """Sample names of the code's metric definitions: the labelled series that appear only
    once used (errors by code, webhooks, remote replicas, per GPU) are among them."""
    registry = CollectorRegistry()
    EngineMetrics(registry)
    DeviceMetrics(registry)
    ServerMetrics(registry)
    Monitor(registry, nvml=None)
    return sample_names(registry) | sample_names(RemoteMetrics().registry)


@pytest.fixture(scope="module")
def scraped(tiny_model_dir: Path) -> Iterator[set[str]]:
    """The sample names a real server's /metrics writes."""
    server = ServerProcess(tiny_model_dir)
    try:
        status, body = server.http("/metrics")
    finally:
        server.stop()
    assert status == 200, body
    yield {s.name for f in text_string_to_metric_families(body) for s in f.samples}


@pytest.mark.parametrize(
    ("kind", "path"),
    [("config", PROMETHEUS / "prometheus.yml"), ("rules", PROMETHEUS / "alerts.yml")],
)
def test_promtool_accepts(kind: str, path: Path) -> None:
    run = subprocess.run(
        [promtool(), "check", kind, str(path)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_code_defines_what_the_server_exports(scraped: set[str]) -> None:
    # Keeps `defined_names` honest: a metric renamed in the code must move both sets.
    assert scraped - defined_names() == set()
    assert {"server_sessions", "engine_queue_delay_seconds_bucket"} <= scraped


def test_dashboard_names_only_exported_metrics(scraped: set[str]) -> None:
    exprs = dashboard_exprs(DASHBOARD.read_text())
    assert exprs
    assert unknown_names(exprs, scraped | defined_names()) == set()


def test_alerts_name_only_exported_metrics(scraped: set[str]) -> None:
    exprs = alert_exprs((PROMETHEUS / "alerts.yml").read_text())
    assert len(exprs) >= 8
    assert unknown_names(exprs, scraped | defined_names()) == set()


def test_a_misspelt_metric_is_reported() -> None:
    text = DASHBOARD.read_text().replace(
        "server_event_loop_lag_seconds_bucket", "server_loop_lag_bucket"
    )
    assert unknown_names(dashboard_exprs(text), defined_names()) == {"server_loop_lag_bucket"}


def test_name_extraction_skips_functions_labels_and_variables() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, code) (rate(a_bucket{code="x"}[$__rate_interval])))'
        " / on (instance) group_left b_total > bool 0"
    )
    assert metric_names(expr) == {"a_bucket", "b_total"}
