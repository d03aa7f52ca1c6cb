"""engine.model.random_weights and its CLI: layout, tokenizer ids, strict loading, determinism."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.features.fbank import Cmvn
from engine.model import random_weights as test_model

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "make_test_model.py"
# The published SenseVoiceSmall files, pinned by content: the package must carry these.
REAL_SHA256 = {
    "am.mvn": "29b3c740a2c0cfc6b308126d31d7f265fa2be74f3bb095cd2f143ea970896ae5",
    "config.yaml": "f71e239ba36705564b5bf2d2ffd07eece07b8e3f2bbf6d2c99d8df856339ac19",
    "configuration.json": "02810a7f8e9e8aee10370a265f7e799728ce25b4c00cdbf4602b303ee395a38e",
}
BPE_NAME = "chn_jpn_yue_eng_ko_spectok.bpe.model"
LAYOUT = (
    "model.pt",
    "config.yaml",
    "am.mvn",
    "configuration.json",
    BPE_NAME,
    "sensestream_test_model.json",
)
TINY_ENCODER = {
    "output_size": 64,
    "attention_heads": 2,
    "linear_units": 128,
    "num_blocks": 2,
    "tp_blocks": 1,
}
# Written out again here (not imported from the script) so the test checks the spec.
EXPECTED_IDS = {
    "<unk>": 0,
    "<s>": 1,
    "</s>": 2,
    "<|zh|>": 24884,
    "<|en|>": 24885,
    "<|yue|>": 24888,
    "<|ja|>": 24892,
    "<|ko|>": 24896,
    "<|nospeech|>": 24992,
    "<|Speech|>": 24993,
    "<|BGM|>": 24994,
    "<|Applause|>": 24995,
    "<|Laughter|>": 24996,
    "<|Cry|>": 24997,
    "<|Sneeze|>": 24998,
    "<|Breath|>": 24999,
    "<|Cough|>": 25000,
    "<|HAPPY|>": 25001,
    "<|SAD|>": 25002,
    "<|ANGRY|>": 25003,
    "<|NEUTRAL|>": 25004,
    "<|FEARFUL|>": 25005,
    "<|DISGUSTED|>": 25006,
    "<|SURPRISED|>": 25007,
    "<|EMO_UNKNOWN|>": 25009,
    "<|Sing|>": 25010,
    "<|Speech_Noise|>": 25011,
    "<|Event_UNK|>": 25012,
    "<|GBG|>": 25013,
    "<|withitn|>": 25016,
    "<|woitn|>": 25017,
}
ROUND_TRIP = (
    "Hello world, this is a test.",
    "the quick brown fox jumps over the lazy dog",
    "Please call me back when you get this message.",
    "你好，世界。今天天气很好。",
    "我们一起去公园散步吧。",
    "请问火车站怎么走？",
)


def real_file(name: str) -> bytes:
    """One of the real model's small files as the package ships it."""
    return (test_model.assets() / "sensevoice_small" / name).read_bytes()


def build_in_process(out: Path, seed: int) -> Path:
    """Build a tiny model dir in this process (funasr is imported once per test session)."""
    test_model.build(out, "tiny", seed)
    return out


def load_state(path: Path) -> dict[str, Any]:
    """Load a model.pt state dict on the CPU."""
    import torch

    state: dict[str, Any] = torch.load(path / "model.pt", map_location="cpu", weights_only=True)
    return state


def states_equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two state dicts have the same keys and bit-identical tensors."""
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def sp_processor(model_dir: Path) -> Any:
    """Load the tokenizer of a model dir."""
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=str(model_dir / BPE_NAME))


def test_layout(tiny_model_dir: Path) -> None:
    for name in LAYOUT:
        assert (tiny_model_dir / name).is_file(), name
    for name in ("am.mvn", "configuration.json"):
        assert (tiny_model_dir / name).read_bytes() == real_file(name)
    marker = json.loads((tiny_model_dir / "sensestream_test_model.json").read_text())
    assert marker["test_model"] is True
    assert marker["size"] == "tiny"
    assert marker["seed"] == 0
    assert isinstance(marker["parameters"], int) and marker["parameters"] > 0
    assert "random" in marker["warning"]


def test_tiny_config_changes_only_the_encoder_sizes(tiny_model_dir: Path) -> None:
    import yaml

    real = yaml.safe_load(real_file("config.yaml"))
    tiny = yaml.safe_load((tiny_model_dir / "config.yaml").read_text())
    assert tiny["encoder_conf"] == {**real["encoder_conf"], **TINY_ENCODER}
    tiny["encoder_conf"] = real["encoder_conf"]
    assert tiny == real


def test_tokenizer_size_and_special_ids(tiny_model_dir: Path) -> None:
    sp = sp_processor(tiny_model_dir)
    assert sp.get_piece_size() == 25055
    for piece, piece_id in EXPECTED_IDS.items():
        assert sp.piece_to_id(piece) == piece_id, piece
    assert sp.unk_id() == 0
    named = set(EXPECTED_IDS.values())
    for piece_id in range(24884, 25055):
        piece = sp.id_to_piece(piece_id)
        if piece_id not in named:
            assert piece == f"<|reserved_{piece_id}|>"
    assert not sp.id_to_piece(24883).startswith("<|")


def test_special_range_is_user_defined(tiny_model_dir: Path) -> None:
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    proto.ParseFromString((tiny_model_dir / BPE_NAME).read_bytes())
    kinds = {proto.pieces[i].type for i in range(24884, 25055)}
    assert kinds == {pb.ModelProto.SentencePiece.USER_DEFINED}
    assert proto.pieces[24883].type == pb.ModelProto.SentencePiece.NORMAL


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_text_round_trips(tiny_model_dir: Path, text: str) -> None:
    sp = sp_processor(tiny_model_dir)
    ids = sp.encode(text)
    assert ids and 0 not in ids, "no <unk> for English or Mandarin text"
    assert sp.decode(ids) == text


def test_state_dict_loads_strictly_from_written_config(tiny_model_dir: Path) -> None:
    import funasr  # noqa: F401  (populates funasr's registry)
    import yaml
    from funasr.models.sense_voice.model import SenseVoiceSmall

    config = yaml.safe_load((tiny_model_dir / "config.yaml").read_text())
    model = SenseVoiceSmall(
        encoder=config["encoder"],
        encoder_conf=config["encoder_conf"],
        input_size=560,
        vocab_size=25055,
        **config["model_conf"],
    )
    state = load_state(tiny_model_dir)
    model.load_state_dict(state, strict=True)
    assert states_equal(model.state_dict(), state)
    marker = json.loads((tiny_model_dir / "sensestream_test_model.json").read_text())
    assert marker["parameters"] == sum(p.numel() for p in model.parameters())


def test_same_seed_is_deterministic(tiny_model_dir: Path, tmp_path: Path) -> None:
    again = build_in_process(tmp_path / "again", seed=0)
    assert states_equal(load_state(again), load_state(tiny_model_dir))
    assert (again / BPE_NAME).read_bytes() == (tiny_model_dir / BPE_NAME).read_bytes()
    assert (again / "config.yaml").read_bytes() == (tiny_model_dir / "config.yaml").read_bytes()


def test_different_seed_differs(tiny_model_dir: Path, tmp_path: Path) -> None:
    other = build_in_process(tmp_path / "other", seed=1)
    a, b = load_state(other), load_state(tiny_model_dir)
    assert a.keys() == b.keys()
    assert not states_equal(a, b)


def test_funasr_automodel_loads_the_weights_from_the_file(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    import torch
    from funasr import AutoModel

    # Seed 5, not 0: AutoModel seeds 0 before it builds, so a seed-0 file would pass even
    # if the weights were never loaded.
    model_dir = build_in_process(tmp_path / "seed5", seed=5)
    threads = torch.get_num_threads()
    auto = AutoModel(
        model=str(model_dir), device="cpu", disable_update=True, ncpu=threads, disable_log=True
    )
    torch.set_num_threads(threads)
    loaded = {k: v.detach().cpu() for k, v in auto.model.state_dict().items()}
    assert states_equal(loaded, load_state(model_dir))
    assert not states_equal(loaded, load_state(tiny_model_dir))
    assert auto.kwargs["tokenizer"].get_vocab_size() == 25055


@pytest.mark.parametrize("name", sorted(REAL_SHA256))
def test_package_ships_the_real_small_files(name: str) -> None:
    assert hashlib.sha256(real_file(name)).hexdigest() == REAL_SHA256[name]


def test_packaged_files_describe_the_real_architecture(tmp_path: Path) -> None:
    import yaml

    encoder = yaml.safe_load(real_file("config.yaml"))["encoder_conf"]
    assert (encoder["output_size"], encoder["attention_heads"]) == (512, 4)
    assert (encoder["num_blocks"], encoder["tp_blocks"]) == (50, 20)
    (tmp_path / "am.mvn").write_bytes(real_file("am.mvn"))
    cmvn = Cmvn.from_file(tmp_path / "am.mvn")
    assert cmvn.shift.shape == cmvn.scale.shape == (560,)


def test_script_is_a_thin_cli_that_builds_from_any_directory(tmp_path: Path) -> None:
    out = tmp_path / "model"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--size", "tiny", "--out", str(out), "--seed", "3"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("make_test_model: wrote tiny model (RANDOM weights, seed 3)")
    assert json.loads((out / "sensestream_test_model.json").read_text())["seed"] == 3


def test_unknown_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="size must be one of tiny, full"):
        test_model.build(tmp_path / "out", "huge")
    assert not (tmp_path / "out").exists()
