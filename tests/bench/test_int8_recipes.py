"""The int8 recipe benchmark on the tiny test model: every recipe runs and is compared."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tools.bench.int8_recipes import RECIPES, chosen_recipes, load_clips, main


def test_every_recipe_is_timed_and_held_against_fp32(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "recipes.json"
    assert main(["--model", str(tiny_model_dir), "--work", str(tmp_path / "q"), "--clips", "2",
                 "--passes", "1", "--threads", "1", "--json", str(out)]) == 0  # fmt: skip
    rows = {row["recipe"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"fp32", *(r.name for r in RECIPES)}
    assert rows["fp32"]["frame_agreement_with_fp32"] == 1.0
    assert all(0.0 <= row["frame_agreement_with_fp32"] <= 1.0 for row in rows.values())
    assert len(list((tmp_path / "q").glob("*.onnx"))) == len(RECIPES)


def test_a_subset_from_saved_clips_keeps_the_exports_recipe_first(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    rng = np.random.default_rng(0)
    clips = tmp_path / "clips.npz"
    np.savez(clips, a=(rng.standard_normal(24000) * 3000).astype(np.int16))
    out = tmp_path / "recipes.json"
    assert main(["--model", str(tiny_model_dir), "--work", str(tmp_path / "q"), "--clips", "5",
                 "--passes", "1", "--threads", "1", "--recipes", "s8-per-channel,s8-per-channel",
                 "--clips-npz", str(clips), "--json", str(out)]) == 0  # fmt: skip
    report = json.loads(out.read_text())
    assert [row["recipe"] for row in report["rows"]] == ["fp32", RECIPES[0].name, "s8-per-channel"]
    assert report["clips"] == 1
    assert report["onnxruntime"]


def test_saved_int16_clips_come_back_as_float_in_key_order(tmp_path: Path) -> None:
    path = tmp_path / "clips.npz"
    np.savez(path, b=np.array([16384], np.int16), a=np.array([0.25], np.float32))
    assert [c.tolist() for c in load_clips(path)] == [[0.25], [0.5]]


def test_an_unknown_recipe_is_refused_by_name() -> None:
    with pytest.raises(SystemExit, match="unknown recipe"):
        chosen_recipes("u8-per-tensor,s9")


@pytest.mark.parametrize(
    ("arrays", "message"),
    [({}, "holds no clips"), ({"a": np.zeros(4, np.int32)}, "int16 or float32")],
)
def test_saved_clips_that_are_not_samples_are_refused(
    tmp_path: Path, arrays: dict[str, np.ndarray], message: str
) -> None:
    path = tmp_path / "clips.npz"
    np.savez(path, **arrays)
    with pytest.raises(SystemExit, match=message):
        load_clips(path)


def test_a_blockwise_recipe_turns_the_weight_matmuls_into_matmulnbits(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    import onnx

    from engine.backends.registry import ensure_onnx
    from engine.model.directory import resolve_model
    from tools.bench.int8_recipes import quantize

    ensure_onnx(resolve_model(str(tiny_model_dir)), "fp32")
    src = tiny_model_dir / "model.onnx"
    recipe = next(r for r in RECIPES if r.bits == 8)
    ops = [
        n.op_type for n in onnx.load(str(quantize(src, tmp_path / "w8.onnx", recipe))).graph.node
    ]
    source = onnx.load(str(src))
    weights = {i.name for i in source.graph.initializer}
    weight_matmuls = sum(
        1 for n in source.graph.node if n.op_type == "MatMul" and n.input[1] in weights
    )
    assert ops.count("MatMulNBits") == weight_matmuls > 0
    assert [p for p in tmp_path.iterdir()] == [tmp_path / "w8.onnx"]  # no partial file left
