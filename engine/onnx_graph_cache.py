"""onnxruntime's optimized CPU graph, kept so that a restart skips the optimizer.

Opening the full-size int8 export costs about 2 s, most of it in graph optimization; the
graph it produces loads in about 1 s with optimization off. The optimized graph may use
kernels for this CPU's instruction set, so it is keyed by the CPU's model and flags, the
onnxruntime version and the export's size and mtime: any change optimizes afresh. An
unreadable entry is deleted and rebuilt, never trusted.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.tuning_cache import cpu_identity, tuning_key, weights_fact

log = logging.getLogger("sensestream.engine")
FORMAT = 1


def cached_graph_path(folder: Path, source: Path) -> Path:
    """Where the optimized graph of `source` for this CPU and onnxruntime lives."""
    import onnxruntime as ort

    facts = {
        "format": FORMAT,
        "source": weights_fact(source),
        "onnxruntime": ort.__version__,
        "cpu": cpu_identity(),
    }
    # Entries of one export share a prefix, so a newer one can replace the older.
    prefix = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:12]
    return folder / f"graph-{prefix}-{tuning_key(facts)}.onnx"


def open_with_graph_cache(
    source: Path, folder: Path, options: Callable[[], Any], providers: list[Any]
) -> Any:
    """An InferenceSession of `source`, from the cached optimized graph when there is one.

    `options` makes fresh SessionOptions (a session consumes its own).
    """
    import onnxruntime as ort

    cached = cached_graph_path(folder, source)
    if cached.is_file():
        settings = options()
        settings.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            return ort.InferenceSession(str(cached), settings, providers=providers)
        except _ort_errors() as exc:
            log.warning("rebuilding the unreadable optimized graph %s: %s", cached, exc)
            cached.unlink(missing_ok=True)
    return _optimize_and_store(source, cached, options(), providers)


def _optimize_and_store(source: Path, cached: Path, settings: Any, providers: list[Any]) -> Any:
    import onnxruntime as ort

    partial = cached.with_name(f"{cached.stem}.{os.getpid()}.tmp")
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.warning("not caching the optimized graph in %s: %s", cached.parent, exc)
        return ort.InferenceSession(str(source), settings, providers=providers)
    settings.optimized_model_filepath = str(partial)
    settings.add_session_config_entry("session.save_model_format", "ONNX")
    session = ort.InferenceSession(str(source), settings, providers=providers)
    try:
        partial.replace(cached)
    except OSError as exc:
        log.warning("could not store the optimized graph %s: %s", cached, exc)
        partial.unlink(missing_ok=True)
        return session
    _drop_older(cached)
    return session


def _drop_older(current: Path) -> None:
    """Remove this export's graphs for other keys (an older export, CPU or runtime)."""
    prefix = current.name.rsplit("-", 1)[0]
    for other in current.parent.glob(f"{prefix}-*.onnx"):
        if other != current:
            other.unlink(missing_ok=True)


def _ort_errors() -> tuple[type[Exception], ...]:
    """What onnxruntime raises for a file it cannot load (none derive from RuntimeError)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    return (state.Fail, state.InvalidGraph, state.InvalidProtobuf, state.NoSuchFile)
