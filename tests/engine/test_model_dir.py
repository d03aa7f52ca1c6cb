"""Model resolution: local dirs, missing files, offline ModelScope ids, weight verification."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest
import torch

from engine import model_dir as md
from engine.errors import ModelDirIncompleteError, ModelNotFoundError, WeightsMismatchError
from engine.model_dir import load_model_dir, resolve_model
from engine.torch_model import build_sensevoice, load_weights


def copy_model(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_local_dir_resolves(tiny_model_dir: Path) -> None:
    found = resolve_model(str(tiny_model_dir))
    assert found.path == tiny_model_dir.resolve()
    assert found.tokenizer_path.name == "chn_jpn_yue_eng_ko_spectok.bpe.model"
    assert found.is_test_model


def test_missing_files_are_all_listed(tiny_model_dir: Path, tmp_path: Path) -> None:
    broken = copy_model(tiny_model_dir, tmp_path / "broken")
    (broken / "am.mvn").unlink()
    (broken / "model.pt").unlink()
    with pytest.raises(ModelDirIncompleteError) as info:
        resolve_model(str(broken))
    assert "am.mvn" in str(info.value)
    assert "model.pt" in str(info.value)
    assert "--model" in str(info.value)


def test_nonexistent_path_is_not_treated_as_an_id(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_model(str(tmp_path / "nope"))


def test_offline_id_fails_within_deadline() -> None:
    released = threading.Event()

    def hanging_download(model_id: str) -> str:
        released.wait(30)  # a download that never connects
        return "/nowhere"

    def no_cache(model_id: str, *, local_files_only: bool = False) -> str:
        if local_files_only:
            raise FileNotFoundError("not cached")
        return hanging_download(model_id)

    started = time.monotonic()
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model("iic/SenseVoiceSmall", timeout_s=1.0, download=no_cache)
    released.set()
    assert time.monotonic() - started < 5
    assert "local directory" in str(info.value)


def test_real_offline_modelscope_fails_within_10s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real client on this network-less machine: cache miss, then a deadline.
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms-cache"))
    started = time.monotonic()
    with pytest.raises(ModelNotFoundError, match="--model"):
        resolve_model("iic/SenseVoiceSmall")
    assert time.monotonic() - started < 12


def test_cached_modelscope_id_resolves(tiny_model_dir: Path) -> None:
    def cached(model_id: str, *, local_files_only: bool = False) -> str:
        assert local_files_only, "a cached id must not touch the network"
        return str(tiny_model_dir)

    assert resolve_model("iic/SenseVoiceSmall", download=cached).path == tiny_model_dir.resolve()


def test_mismatched_weights_are_refused(tiny_model_dir: Path, tmp_path: Path) -> None:
    broken = copy_model(tiny_model_dir, tmp_path / "mismatch")
    state = torch.load(broken / "model.pt", weights_only=True)
    first = next(iter(state))
    state[first] = torch.zeros(3, 3)
    state.pop(list(state)[-1])
    state["extra.weight"] = torch.zeros(1)
    torch.save(state, broken / "model.pt")
    model_dir = load_model_dir(broken)
    with pytest.raises(WeightsMismatchError) as info:
        load_weights(build_sensevoice(model_dir), model_dir)
    text = str(info.value)
    assert "missing" in text and "unexpected" in text and "wrong shape" in text


def test_weights_really_come_from_the_file(tiny_model_dir: Path) -> None:
    model_dir = load_model_dir(tiny_model_dir)
    model = build_sensevoice(model_dir)
    load_weights(model, model_dir)
    state = torch.load(tiny_model_dir / "model.pt", weights_only=True)
    for key, value in state.items():
        assert torch.equal(model.state_dict()[key], value), key


def test_wrapped_state_dicts_load(tiny_model_dir: Path, tmp_path: Path) -> None:
    wrapped = copy_model(tiny_model_dir, tmp_path / "wrapped")
    state = torch.load(wrapped / "model.pt", weights_only=True)
    torch.save({"state_dict": {f"module.{k}": v for k, v in state.items()}}, wrapped / "model.pt")
    model_dir = load_model_dir(wrapped)
    load_weights(build_sensevoice(model_dir), model_dir)


def test_onnx_path_names() -> None:
    assert md.ONNX_NAMES == {
        "fp32": "model.onnx",
        "int8": "model.int8.onnx",
        "fp16": "model.fp16.onnx",
    }
