"""onnxruntime's optimized CPU graph, kept so that a restart skips the optimizer.

Opening the full-size int8 export costs about 3 s, most of it in graph optimization. The
optimized graph is stored with its weights in a file of their own: opened with
optimization off, that takes 1.3-1.7 s, where the same graph with its weights inside the
protobuf took 2.1-2.6 s (onnxruntime parses the whole 240 MB message, then copies every
weight out of it). The optimized graph may use kernels for this CPU's instruction set, so
an entry is keyed by the CPU's model and flags, the onnxruntime version and the export's
size and mtime: any change optimizes afresh. An unreadable entry is deleted and rebuilt,
never trusted.

An entry is a folder, `graph.onnx` and `weights.bin`, written under a temporary name and
renamed into place, so a reader never sees half of one. onnxruntime can also store the
weights prepacked (`session.save_external_prepacked_constant_initializers`), which opened
0.1-0.3 s faster still, but in 1.23.2 reopening such an fp32 graph crashes the process, so
it is not used.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.tuning_cache import cpu_identity, tuning_key, weights_fact

log = logging.getLogger("sensestream.engine")
FORMAT = 2
GRAPH = "graph.onnx"
WEIGHTS = "weights.bin"
# Smaller tensors stay inside the graph: a separate read each would cost more than it saves.
EXTERNAL_MIN_BYTES = 1024


def cached_graph_path(folder: Path, source: Path) -> Path:
    """The folder that holds the optimized graph of `source` for this CPU and onnxruntime."""
    import onnxruntime as ort

    facts = {
        "format": FORMAT,
        "source": weights_fact(source),
        "onnxruntime": ort.__version__,
        "cpu": cpu_identity(),
    }
    # Entries of one export share a prefix, so a newer one can replace the older.
    prefix = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:12]
    return folder / f"graph-{prefix}-{tuning_key(facts)}"


def open_with_graph_cache(
    source: Path, folder: Path, options: Callable[[], Any], providers: list[Any]
) -> Any:
    """An InferenceSession of `source`, from the cached optimized graph when there is one.

    `options` makes fresh SessionOptions (a session consumes its own).
    """
    import onnxruntime as ort

    entry = cached_graph_path(folder, source)
    if (entry / GRAPH).is_file():
        settings = options()
        settings.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            return ort.InferenceSession(str(entry / GRAPH), settings, providers=providers)
        except _ort_errors() as exc:
            log.warning("rebuilding the unreadable optimized graph %s: %s", entry, exc)
    if entry.exists():
        _remove(entry)  # unreadable, or a folder some other program left half-made
    return _optimize_and_store(source, entry, options(), providers)


def _optimize_and_store(source: Path, entry: Path, settings: Any, providers: list[Any]) -> Any:
    import onnxruntime as ort

    partial = entry.with_name(f"{entry.name}.{os.getpid()}.tmp")
    try:
        partial.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.warning("not caching the optimized graph in %s: %s", entry.parent, exc)
        return ort.InferenceSession(str(source), settings, providers=providers)
    settings.optimized_model_filepath = str(partial / GRAPH)
    for key, value in (
        ("session.save_model_format", "ONNX"),
        ("session.optimized_model_external_initializers_file_name", WEIGHTS),
        ("session.optimized_model_external_initializers_min_size_in_bytes", EXTERNAL_MIN_BYTES),
    ):
        settings.add_session_config_entry(key, str(value))
    session = ort.InferenceSession(str(source), settings, providers=providers)
    try:
        partial.rename(entry)
    except OSError as exc:  # another process stored the same entry first
        log.warning("could not store the optimized graph %s: %s", entry, exc)
        _remove(partial)
        return session
    _drop_older(entry)
    return session


def _drop_older(current: Path) -> None:
    """Remove this export's other entries (an older export, CPU, runtime or format).

    Another process's entry in the making is left alone; one whose process is gone goes.
    """
    prefix = current.name.rsplit("-", 1)[0]
    for other in current.parent.glob(f"{prefix}-*"):
        if other != current and not _being_written(other):
            _remove(other)


def _being_written(path: Path) -> bool:
    name, _, pid = path.stem.rpartition(".")
    if path.suffix != ".tmp" or not name or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # alive, under another user
        return True
    return True


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _ort_errors() -> tuple[type[Exception], ...]:
    """What onnxruntime raises for a graph or weights file it cannot load.

    None of them derive from RuntimeError; a missing weights file is a RuntimeException.
    """
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    return (
        state.Fail,
        state.InvalidGraph,
        state.InvalidProtobuf,
        state.NoSuchFile,
        state.RuntimeException,
    )
