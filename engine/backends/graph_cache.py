"""onnxruntime's optimized CPU graph, kept so that a restart skips the optimizer.

Opening the full-size int8 export costs about 3 s, most of it in graph optimization. The
optimized graph is stored with its weights in a file of their own: opened with
optimization off, that took 1.32-1.43 s, where the same graph with its weights inside the
protobuf took 1.73-2.13 s (onnxruntime parses the whole 240 MB message, then copies every
weight out of it). The optimized graph may use kernels for this CPU's instruction set, so
an entry is keyed by the CPU's model and flags, the onnxruntime version and the export's
size and mtime: any change optimizes afresh. An unreadable entry is deleted and rebuilt,
never trusted, and a cache that cannot be written only costs the optimizer's time.

An entry is a folder, `graph.onnx` and `weights.bin`, written under a unique temporary
name and renamed into place, so a reader never sees half of one; the cache folder may be
shared by several hosts or containers. onnxruntime can also store the weights prepacked
(`session.save_external_prepacked_constant_initializers`), which opened 0.1-0.3 s faster
still, but in 1.23.2 reopening such an fp32 graph crashes the process, so it is not used.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.serving.tuning_cache import cpu_identity, tuning_key, weights_fact

log = logging.getLogger("sensestream.engine")
FORMAT = 2
GRAPH = "graph.onnx"
WEIGHTS = "weights.bin"
# Smaller tensors stay inside the graph: a separate read each would cost more than it saves.
EXTERNAL_MIN_BYTES = 1024
# A temporary folder this old was left by a writer that died: storing takes seconds.
STALE_TEMP_S = 3600.0


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
    _sweep_stale_temps(entry)
    if entry.is_dir():
        stamp = _stamp(entry / GRAPH)
        settings = options()
        settings.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            return ort.InferenceSession(str(entry / GRAPH), settings, providers=providers)
        except _ort_errors() as exc:
            log.warning("rebuilding the unreadable optimized graph %s: %s", entry, exc)
        _discard(entry, stamp)
    elif entry.exists():
        _remove(entry)  # a file where the folder goes: some other program's
    return _optimize_and_store(source, entry, options, providers)


def _optimize_and_store(
    source: Path, entry: Path, options: Callable[[], Any], providers: list[Any]
) -> Any:
    import onnxruntime as ort

    def uncached() -> Any:
        return ort.InferenceSession(str(source), options(), providers=providers)

    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f"{entry.name}.", suffix=".tmp", dir=entry.parent))
    except OSError as exc:
        log.warning("not caching the optimized graph in %s: %s", entry.parent, exc)
        return uncached()
    settings = options()
    settings.optimized_model_filepath = str(partial / GRAPH)
    settings.add_session_config_entry("session.save_model_format", "ONNX")
    settings.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", WEIGHTS
    )
    settings.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", str(EXTERNAL_MIN_BYTES)
    )
    try:
        session = ort.InferenceSession(str(source), settings, providers=providers)
    except _ort_errors() as exc:  # the save failed (a full disk, say): serve without caching
        log.warning("could not store the optimized graph %s: %s", entry, exc)
        _remove(partial)
        return uncached()
    try:
        partial.rename(entry)
    except OSError as exc:  # another process stored the same entry first
        log.warning("could not store the optimized graph %s: %s", entry, exc)
        _remove(partial)
        return session
    _drop_older(entry)
    return session


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        status = path.stat()
    except OSError:
        return None
    return status.st_ino, status.st_mtime_ns


def _discard(entry: Path, stamp: tuple[int, int] | None) -> None:
    """Remove the entry that failed to open, unless another process has replaced it since."""
    if _stamp(entry / GRAPH) != stamp:
        return  # already rebuilt (or removed) by another process: not the one that failed
    # Renamed first, so that a rebuilt entry renamed into place meanwhile is not removed.
    claimed = entry.with_name(f"{entry.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        entry.rename(claimed)
    except OSError:
        return
    _remove(claimed)


def _same_export(entry: Path) -> list[Path]:
    """Everything in the cache folder for `entry`'s export: entries of any key, and temps."""
    prefix = entry.name.rsplit("-", 1)[0]
    return list(entry.parent.glob(f"{prefix}-*"))


def _drop_older(current: Path) -> None:
    """Remove this export's entries for other keys (an older export, CPU, runtime, format)."""
    for other in _same_export(current):
        if other != current and other.suffix != ".tmp":
            _remove(other)


def _sweep_stale_temps(entry: Path) -> None:
    """Remove this export's temporary folders whose writers died long ago."""
    cutoff = time.time() - STALE_TEMP_S
    for temp in (p for p in _same_export(entry) if p.suffix == ".tmp"):
        try:
            stale = temp.stat().st_mtime < cutoff
        except OSError:
            continue
        if stale:
            _remove(temp)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _ort_errors() -> tuple[type[Exception], ...]:
    """What onnxruntime raises for a graph or weights file it cannot load or save.

    None of them derive from RuntimeError; a missing weights file is a RuntimeException, a
    graph that cannot be saved an InvalidArgument.
    """
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    return (
        state.Fail,
        state.InvalidArgument,
        state.InvalidGraph,
        state.InvalidProtobuf,
        state.NoSuchFile,
        state.RuntimeException,
    )
