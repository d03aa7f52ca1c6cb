"""One /metrics for a host of processes: Prometheus scrapes the supervisor alone, so it merges
every process's own exposition into its answer, each series labelled by the process it came from.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger("sensestream.host")

SCRAPE_OK = "sensestream_process_scrape_ok"
_SCRAPE_OK_HELP = "1 when this process's metrics are in this scrape, 0 when they did not parse."

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# A histogram's `le` and a summary's `quantile` are part of a series' shape: naming a process by
# one would corrupt every histogram or summary it exposes.
_RESERVED = frozenset({"le", "quantile"})


@dataclass(frozen=True, slots=True)
class Exposition:
    """One process's scrape and the labels that name it."""

    # Not hashed (a mapping is not hashable); equal parts still hash alike, by their text.
    labels: Mapping[str, str] = field(hash=False)
    text: str

    def __post_init__(self) -> None:
        for name in self.labels:
            if not _LABEL_NAME.fullmatch(name) or name.startswith("__") or name in _RESERVED:
                raise ValueError(f"not a label a process can be named by: {name!r}")
        # A read-only copy: the caller's dict changing later must not relabel this part.
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))


def merge(parts: Sequence[Exposition]) -> bytes:
    """One Prometheus text exposition holding every part's series, each labelled by its process."""
    parsed = [(part, _parse(part)) for part in parts]
    merged = _Merged()
    if parts:
        # First, so that no process's own family of this name can take it over.
        scrape_ok = Metric(SCRAPE_OK, _SCRAPE_OK_HELP, "gauge")
        for part, families in parsed:
            scrape_ok.add_sample(SCRAPE_OK, dict(part.labels), 0.0 if families is None else 1.0)
        merged.add(scrape_ok, {})
    for part, families in parsed:
        for family in families or ():
            merged.add(family, part.labels)
    return generate_latest(merged)


def _parse(part: Exposition) -> list[Metric] | None:
    """The part's families, or None (logged) when its text is not an exposition."""
    try:
        # The parser is a generator that raises only when it reaches a bad line: read it all
        # before merging any of it, so that a garbled part adds nothing rather than half.
        return list(text_string_to_metric_families(part.text))
    except (ValueError, IndexError) as exc:
        log.warning("metrics of process %s did not parse: %s", _named(part.labels), exc)
        return None


class _Merged:
    """Families by the name they are written under; a Collector for `generate_latest`."""

    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}
        self._series: set[tuple[str, frozenset[tuple[str, str]]]] = set()

    def add(self, family: Metric, labels: Mapping[str, str]) -> None:
        key = _written_name(family)
        merged = self._families.get(key)
        if merged is None:
            merged = self._families[key] = Metric(family.name, family.documentation, family.type)
        elif merged.type != family.type:
            # One name, one TYPE: a process that disagrees (say, mid-upgrade) loses this family
            # rather than making the whole scrape one Prometheus refuses.
            log.warning(
                "metric %s of process %s is a %s, already a %s: left out",
                key,
                _named(labels),
                family.type,
                merged.type,
            )
            return
        for sample in family.samples:
            relabelled = sample._replace(labels=_with_process(sample.labels, labels))
            series = (relabelled.name, frozenset(relabelled.labels.items()))
            if series in self._series:
                # Two parts named alike would repeat a series, which Prometheus rejects.
                log.warning("series %s%s is repeated: left out", sample.name, relabelled.labels)
                continue
            self._series.add(series)
            merged.samples.append(relabelled)

    def collect(self) -> Iterable[Metric]:
        return list(self._families.values())


def _written_name(family: Metric) -> str:
    # The writer adds `_total` to a counter's family name and `_info` to an info's: that is
    # the name two families must not share (one TYPE line each).
    return family.name + {"counter": "_total", "info": "_info"}.get(family.type, "")


def _with_process(labels: Mapping[str, str], added: Mapping[str, str]) -> dict[str, str]:
    """The sample's labels and the process's; a clashing one of the sample's is kept as
    `exported_<name>` (prefixed again while that is taken), as Prometheus does with a
    target's labels, so that neither value is lost."""
    result = dict(labels)
    # Shortest first, the order Prometheus resolves them in.
    clashing = sorted((name for name in added if name in result), key=len)
    moved = [(name, result.pop(name)) for name in clashing]
    result.update(added)
    for name, value in moved:
        exported = "exported_" + name
        while exported in result:
            exported = "exported_" + exported
        result[exported] = value
    return result


def _named(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items()) or "(own)"
