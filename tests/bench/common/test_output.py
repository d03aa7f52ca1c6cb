"""The benchmarks' shared chores: the result JSON, the machine, turns, the common flags."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from engine.serving.tuning_cache import cpu_identity, usable_cpus
from tools.bench.common.cli import (
    add_api_key,
    add_json,
    add_rounds,
    add_server_args,
    counts,
    parser_for,
)
from tools.bench.common.output import machine, write_json
from tools.bench.common.rounds import alternate, in_turn


def test_the_json_goes_into_a_new_folder_with_one_final_newline(tmp_path: Path) -> None:
    path = tmp_path / "new" / "result.json"
    text = write_json(path, {"a": [1, 2], "text": "你好"}, indent=2)
    assert path.read_text(encoding="utf-8") == text + "\n"
    assert json.loads(text) == {"a": [1, 2], "text": "你好"}
    assert "你好" in text  # written as it is, not escaped
    assert write_json(None, {"a": 1}) == '{\n "a": 1\n}'  # nothing written, text returned


def test_the_machine_says_what_is_asked_in_that_order() -> None:
    facts = machine("cpu", "cpus")
    assert list(facts) == ["cpu", "cpus"]
    assert facts == {"cpu": cpu_identity(), "cpus": usable_cpus()}
    assert machine("python")["python"].count(".") == 2
    with pytest.raises(KeyError):
        machine("gpu")


def test_turns_flip_every_round() -> None:
    assert in_turn("ab", 0) == ["a", "b"] and in_turn("ab", 1) == ["b", "a"]
    assert list(alternate(["a", "b", "c"], 2)) == [
        (0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"), (1, "a"),
    ]  # fmt: skip


def test_the_common_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """One paragraph of the docstring describes the command; the flags parse alike."""
    parser = parser_for("First line\nstill the first paragraph.\n\nDetails.")
    assert parser.description == "First line\nstill the first paragraph."
    assert parser_for("A.\n\nB.", whole=True).description == "A.\n\nB."
    add_json(parser)
    add_rounds(parser, 3)
    add_server_args(parser)
    args = parser.parse_args(["--json", "out/x.json", "--server-args=--vad-thread"])
    assert (args.json, args.rounds, args.server_args) == (Path("out/x.json"), 3, "--vad-thread")
    assert parser.parse_args([]).json is None
    monkeypatch.setenv("SENSESTREAM_BENCH_API_KEY", "from-env")
    keyed = parser_for(None)
    add_api_key(keyed)
    assert keyed.parse_args([]).api_key == "from-env"
    assert keyed.parse_args(["--api-key", "k"]).api_key == "k"


def test_counts_are_positive_integers() -> None:
    assert counts("1,4,16") == [1, 4, 16] and counts("2,") == [2]
    for bad in ("", "0,2", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            counts(bad)
