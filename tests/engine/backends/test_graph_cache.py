"""A CPU session reuses onnxruntime's optimized graph from an earlier start, with equal ids."""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from engine.backends import graph_cache
from engine.backends.graph_cache import GRAPH, WEIGHTS, cached_graph_path
from engine.backends.onnx import OnnxBackend
from engine.backends.registry import BackendOptions, create_backend, ensure_onnx
from engine.features.fbank import Frontend
from engine.model.directory import ModelDir, load_model_dir
from engine.types import DecodeOptions
from tests.speech import Clip

AUTO = DecodeOptions()


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir: Path) -> ModelDir:
    return load_model_dir(tiny_model_dir)


@pytest.fixture(scope="module")
def feats(model_dir: ModelDir, speech_clips: list[Clip]) -> list[np.ndarray]:
    frontend = Frontend.from_model_dir(model_dir.path)
    return [frontend.features(c.audio) for c in speech_clips[:3]]


def ids(backend: OnnxBackend, feats: list[np.ndarray]) -> list[list[int]]:
    return [out.tolist() for out in backend.run(feats, [AUTO] * len(feats))]


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_cached_graph_gives_the_same_ids(
    model_dir: ModelDir, feats: list[np.ndarray], tmp_path: Path, precision: str
) -> None:
    source = ensure_onnx(model_dir, precision)
    plain = OnnxBackend(model_dir, precision=precision, onnx_path=source)
    first = OnnxBackend(model_dir, precision=precision, onnx_path=source, graph_cache=tmp_path)
    cached = cached_graph_path(tmp_path, source)
    assert sorted(p.name for p in cached.iterdir()) == [GRAPH, WEIGHTS]
    # The weights live outside the graph: the graph file is a small part of the export.
    assert (cached / GRAPH).stat().st_size < source.stat().st_size / 4
    stamp = (cached / GRAPH).stat().st_mtime_ns
    second = OnnxBackend(model_dir, precision=precision, onnx_path=source, graph_cache=tmp_path)
    assert (cached / GRAPH).stat().st_mtime_ns == stamp  # read, not written again
    assert ids(first, feats) == ids(plain, feats) == ids(second, feats)
    assert [p.name for p in tmp_path.iterdir()] == [cached.name]  # no temporary left


@pytest.mark.parametrize("damage", ["garbage graph", "no weights", "truncated weights", "a file"])
def test_unreadable_graph_is_rebuilt(
    model_dir: ModelDir,
    feats: list[np.ndarray],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    damage: str,
) -> None:
    source = ensure_onnx(model_dir, "fp32")
    OnnxBackend(model_dir, precision="fp32", onnx_path=source, graph_cache=tmp_path)
    cached = cached_graph_path(tmp_path, source)
    weights = cached / WEIGHTS
    if damage == "garbage graph":
        (cached / GRAPH).write_bytes(b"not an onnx graph")
    elif damage == "no weights":
        weights.unlink()
    elif damage == "truncated weights":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    else:
        shutil.rmtree(cached)
        cached.write_bytes(b"an entry of some other program")
    with caplog.at_level(logging.WARNING, logger="sensestream.engine"):
        backend = OnnxBackend(model_dir, precision="fp32", onnx_path=source, graph_cache=tmp_path)
    if damage != "a file":
        assert "rebuilding the unreadable optimized graph" in caplog.text
    assert sorted(p.name for p in cached.iterdir()) == [GRAPH, WEIGHTS]
    plain = OnnxBackend(model_dir, precision="fp32", onnx_path=source)
    assert ids(backend, feats) == ids(plain, feats)


def test_changed_export_replaces_its_older_graph(model_dir: ModelDir, tmp_path: Path) -> None:
    source = tmp_path / "export" / "model.onnx"
    source.parent.mkdir()
    source.write_bytes(ensure_onnx(model_dir, "fp32").read_bytes())
    folder = tmp_path / "cache"
    OnnxBackend(model_dir, precision="fp32", onnx_path=source, graph_cache=folder)
    old = cached_graph_path(folder, source)
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))
    new = cached_graph_path(folder, source)
    assert new != old
    OnnxBackend(model_dir, precision="fp32", onnx_path=source, graph_cache=folder)
    assert sorted(folder.iterdir()) == [new]


def test_storing_sweeps_old_entries_and_stale_temporaries(
    model_dir: ModelDir, tmp_path: Path
) -> None:
    source = ensure_onnx(model_dir, "fp32")
    entry = cached_graph_path(tmp_path, source)
    prefix = entry.name.rsplit("-", 1)[0]
    old_format = tmp_path / f"{prefix}-0123abcd.onnx"  # the single-file entry of format 1
    old_format.write_bytes(b"graph")
    writing = tmp_path / f"{entry.name}.x1y2.tmp"  # another writer's, maybe on another host
    writing.mkdir()
    abandoned = tmp_path / f"{entry.name}.z3w4.tmp"
    abandoned.mkdir()
    two_hours_ago = time.time() - 7200
    os.utime(abandoned, (two_hours_ago, two_hours_ago))
    other_export = tmp_path / "graph-000000000000-0123abcd"
    other_export.mkdir()
    OnnxBackend(model_dir, precision="fp32", onnx_path=source, graph_cache=tmp_path)
    assert sorted(tmp_path.iterdir()) == sorted([entry, writing, other_export])


def test_a_cache_that_cannot_be_saved_still_opens(
    model_dir: ModelDir,
    feats: list[np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = ensure_onnx(model_dir, "fp32")
    gone = tmp_path / "removed-under-the-writer"

    def vanishing_folder(**_: object) -> str:
        return str(gone)  # as if a sweep elsewhere removed it: onnxruntime's save fails

    monkeypatch.setattr(graph_cache.tempfile, "mkdtemp", vanishing_folder)
    with caplog.at_level(logging.WARNING, logger="sensestream.engine"):
        backend = OnnxBackend(model_dir, precision="fp32", onnx_path=source, graph_cache=tmp_path)
    assert "could not store the optimized graph" in caplog.text
    assert list(tmp_path.iterdir()) == []
    plain = OnnxBackend(model_dir, precision="fp32", onnx_path=source)
    assert ids(backend, feats) == ids(plain, feats)


def test_a_failed_entry_replaced_meanwhile_is_kept(model_dir: ModelDir, tmp_path: Path) -> None:
    source = ensure_onnx(model_dir, "fp32")
    OnnxBackend(model_dir, precision="fp32", onnx_path=source, graph_cache=tmp_path)
    entry = cached_graph_path(tmp_path, source)
    seen = graph_cache._stamp(entry / GRAPH)  # what this process failed to open
    shutil.rmtree(entry)  # another process rebuilt it in the meantime
    OnnxBackend(model_dir, precision="fp32", onnx_path=source, graph_cache=tmp_path)
    graph_cache._discard(entry, seen)
    assert sorted(p.name for p in entry.iterdir()) == [GRAPH, WEIGHTS]
    graph_cache._discard(entry, graph_cache._stamp(entry / GRAPH))
    assert list(tmp_path.iterdir()) == []


def test_unwritable_cache_still_opens(model_dir: ModelDir, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would go")
    backend = OnnxBackend(
        model_dir, precision="fp32", onnx_path=ensure_onnx(model_dir, "fp32"), graph_cache=blocker
    )
    assert backend.name == "onnx-fp32-cpu"


def test_create_backend_passes_the_cache(model_dir: ModelDir, tmp_path: Path) -> None:
    options = BackendOptions(precision="fp32", graph_cache=tmp_path)
    create_backend(model_dir, options)
    assert (cached_graph_path(tmp_path, ensure_onnx(model_dir, "fp32")) / GRAPH).is_file()
