"""When an ONNX export is served as it is, and when it is made again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest

from engine.backends.registry import GRAPH_VERSIONS, ensure_onnx
from engine.model.directory import ModelDir, load_model_dir


@pytest.fixture()
def model_dir(tiny_model_dir: Path, tmp_path: Path) -> ModelDir:
    """A writable copy of the test model, so exports land beside it."""
    copy = tmp_path / "model"
    shutil.copytree(tiny_model_dir, copy, ignore=shutil.ignore_patterns("*.onnx", "*.onnx.json"))
    return load_model_dir(copy)


def outputs(path: Path) -> list[str]:
    return [o.name for o in onnx.load(str(path), load_external_data=False).graph.output]


def ops(path: Path) -> set[str]:
    return {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}


def test_a_fresh_export_is_stamped_with_its_weights_and_graph_version(model_dir: ModelDir) -> None:
    path = ensure_onnx(model_dir, "fp32", scored=True)
    stamp = json.loads(path.with_suffix(".onnx.json").read_text())
    assert stamp["graph"] == GRAPH_VERSIONS[True] and stamp["weights"]
    assert ensure_onnx(model_dir, "fp32", scored=True).stat().st_mtime_ns == path.stat().st_mtime_ns


def test_a_scored_export_from_an_older_exporter_is_made_again(model_dir: ModelDir) -> None:
    path = ensure_onnx(model_dir, "fp32", scored=True)
    sidecar = path.with_suffix(".onnx.json")
    # As the exporter before graph versions stamped it: the weights only.
    stamp = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({"weights": stamp["weights"]}))
    path.write_bytes(b"an old graph")
    again = ensure_onnx(model_dir, "fp32", scored=True)
    assert "topk_ids" in outputs(again)
    assert json.loads(sidecar.read_text())["graph"] == GRAPH_VERSIONS[True]


def test_a_plain_export_stamped_with_weights_only_is_still_served(model_dir: ModelDir) -> None:
    path = ensure_onnx(model_dir, "fp32")
    sidecar = path.with_suffix(".onnx.json")
    stamp = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({"weights": stamp["weights"]}))
    before = path.stat().st_mtime_ns
    assert ensure_onnx(model_dir, "fp32").stat().st_mtime_ns == before  # version 1: current


def test_an_unstamped_export_is_served_as_shipped(model_dir: ModelDir) -> None:
    path = ensure_onnx(model_dir, "fp32", scored=True)
    path.with_suffix(".onnx.json").unlink()
    before = path.stat().st_mtime_ns
    assert ensure_onnx(model_dir, "fp32", scored=True).stat().st_mtime_ns == before


def test_an_unreadable_stamp_is_made_again(model_dir: ModelDir) -> None:
    path = ensure_onnx(model_dir, "fp32", scored=True)
    path.with_suffix(".onnx.json").write_text("{not json")
    path.write_bytes(b"half a graph")
    assert "topk_ids" in outputs(ensure_onnx(model_dir, "fp32", scored=True))


def test_the_scored_head_makes_one_pass_over_the_vocabulary(model_dir: ModelDir) -> None:
    # The best id is the first candidate: no ArgMax, no LogSoftmax over the 25k outputs.
    path = ensure_onnx(model_dir, "fp32", scored=True)
    assert "TopK" in ops(path) and not {"ArgMax", "LogSoftmax"} & ops(path)


def test_a_stamp_replaces_a_link_instead_of_writing_through_it(
    model_dir: ModelDir, tmp_path: Path
) -> None:
    # A view of a model is a folder of links to its files (tests/conftest.py's demo_model,
    # the hotwords benchmark): exporting there must leave the linked model's files alone.
    source = ensure_onnx(model_dir, "fp32", scored=True)
    sidecar = source.with_suffix(".onnx.json")
    sidecar.write_text(json.dumps({"weights": "an older model", "graph": 1}))
    before = sidecar.read_text()
    view = tmp_path / "view"
    view.mkdir()
    for item in model_dir.path.iterdir():
        (view / item.name).symlink_to(item)
    made = ensure_onnx(load_model_dir(view), "fp32", scored=True)
    assert made.parent == view and not made.is_symlink()
    assert not made.with_suffix(".onnx.json").is_symlink()
    assert sidecar.read_text() == before  # the model's own stamp is untouched
