"""Our weights in sherpa-onnx's SenseVoice layout: the graph, the metadata, the tokens, and
(where the side environment exists) sherpa itself decoding the demo model to real words."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

from engine.model.directory import load_model_dir
from engine.model.tokenizer import Tokenizer
from tools.bench.peers.sherpa_export import export_sherpa
from tools.demo_model import texts
from tools.demo_model.evaluate import wer
from tools.demo_model.voices import Voice, speak

REPO = Path(__file__).resolve().parents[3]
#: Keys sherpa-onnx 1.12.40 exits without (offline-sense-voice-model.cc).
REQUIRED = {"vocab_size", "lfr_window_size", "lfr_window_shift", "normalize_samples"}
REQUIRED |= {"with_itn", "without_itn", "neg_mean", "inv_stddev"}
REQUIRED |= {f"lang_{x}" for x in ("auto", "zh", "en", "ja", "ko", "yue")}


def sherpa_python() -> Path | None:
    default = Path.home() / ".cache/sensestream/peers/sherpa/bin/python"
    path = Path(os.environ.get("SENSESTREAM_SHERPA_PYTHON", default))
    return path if path.exists() else None


def test_the_export_has_sherpas_inputs_output_metadata_and_tokens(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    model_dir = load_model_dir(tiny_model_dir)
    exported = export_sherpa(model_dir, tmp_path, int8=True)
    assert exported.model.name == "model.int8.onnx"
    for path in (tmp_path / "model.onnx", exported.model):
        graph = onnx.load(str(path))
        inputs = [(i.name, i.type.tensor_type.elem_type) for i in graph.graph.input]
        i32, f32 = onnx.TensorProto.INT32, onnx.TensorProto.FLOAT
        assert inputs == [("x", f32), ("x_length", i32), ("language", i32), ("text_norm", i32)]
        assert [o.name for o in graph.graph.output] == ["logits"]
        meta = {p.key: p.value for p in graph.metadata_props}
        assert set(meta) >= REQUIRED and "Nano" not in meta["comment"]
        assert len(meta["neg_mean"].split(",")) == len(meta["inv_stddev"].split(",")) == 560
        assert (meta["lang_en"], meta["with_itn"], meta["normalize_samples"]) == ("4", "14", "0")
    lines = exported.tokens.read_text(encoding="utf-8").splitlines()
    tokenizer = Tokenizer.from_file(model_dir.tokenizer_path)
    assert len(lines) == tokenizer.vocab_size == int(meta["vocab_size"])
    assert lines[24885] == "<|en|> 24885"


@pytest.mark.skipif(sherpa_python() is None, reason="no sherpa-onnx side environment")
def test_sherpa_decodes_the_demo_models_export_to_the_words_spoken(tmp_path: Path) -> None:
    exported = export_sherpa(load_model_dir(REPO / "models" / "demo"), tmp_path, int8=False)
    sentences = texts.held_out(19, 4)
    pad = np.zeros(4000, np.float32)
    clips = {
        f"c{i}": np.concatenate([pad, speak(s.spoken, Voice("espeak", "en-us+m3")), pad])
        for i, s in enumerate(sentences)
    }
    np.savez(tmp_path / "clips.npz", **clips)
    command = [str(sherpa_python()), "-m", "tools.bench.peers.sherpa_worker"]
    command += ["--model", str(exported.model), "--tokens", str(exported.tokens)]
    command += ["--clips", str(tmp_path / "clips.npz"), "--scenario", "batch4"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.splitlines()[-1])
    # A wrong input dtype or a missing prompt would give empty text, not an error.
    assert all(t.strip() for t in result["texts"])
    assert wer([s.written for s in sentences], result["texts"]) < 0.4, result["texts"]
