"""The int8 recipe benchmark on the tiny test model: every recipe runs and is compared."""

from __future__ import annotations

import json
from pathlib import Path

from tools.bench_int8_recipes import RECIPES, main


def test_every_recipe_is_timed_and_held_against_fp32(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "recipes.json"
    assert main(["--model", str(tiny_model_dir), "--work", str(tmp_path / "q"), "--clips", "2",
                 "--passes", "1", "--threads", "1", "--json", str(out)]) == 0  # fmt: skip
    rows = {row["recipe"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"fp32", *(r.name for r in RECIPES)}
    assert rows["fp32"]["frame_agreement_with_fp32"] == 1.0
    assert all(0.0 <= row["frame_agreement_with_fp32"] <= 1.0 for row in rows.values())
    assert len(list((tmp_path / "q").glob("*.onnx"))) == len(RECIPES)
