"""The server-wide hotwords file: parsed and checked at start, merged into every session."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from engine.decoding.context_graph import MAX_GRAPH_TOKENS
from engine.decoding.hotwords import Speller
from engine.model.directory import load_model_dir
from engine.model.tokenizer import Tokenizer
from engine.types import Hotword
from server.app import session_config
from server.config import load_config
from server.hotwords_file import HotwordsFileError, read_hotwords_file, stream_refusal
from tests.engine.remote_fakes import REPORT
from tests.server.conftest import ServerProcess
from tools.spawn import SpawnError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hotwords.txt"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_file_of_phrases_with_optional_boosts(tmp_path: Path) -> None:
    path = write(tmp_path, "# products\nAcme  Corp\t3.5\n\nKowalski\nAcme Corp\t9\n  Zed \t\n")
    assert read_hotwords_file(path) == (
        Hotword("Acme Corp", 3.5),  # the first of equal phrases wins
        Hotword("Kowalski"),
        Hotword("Zed"),
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("Acme\thigh\n", ":1: the boost 'high'"),
        ("ok\nAcme\t11\n", "boost"),
        ("x" * 65 + "\n", "characters"),
        ("\t2\n", "characters"),
        ("".join(f"w{i}\n" for i in range(1001)), "at most"),
    ],
)
def test_a_bad_line_is_refused_naming_the_file(tmp_path: Path, text: str, fragment: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(HotwordsFileError, match=fragment) as info:
        read_hotwords_file(path)
    assert str(path) in str(info.value)


def test_the_option_reaches_every_sessions_config(tmp_path: Path) -> None:
    path = write(tmp_path, "Acme Corp\t3\n")
    config = load_config(["--hotwords-file", str(path)], {})
    session = config.session.streaming(config.limits.session_limits())
    assert session.hotwords == (Hotword("Acme Corp", 3.0),)
    with pytest.raises(ValueError, match="cannot read the hotwords file"):
        load_config(["--hotwords-file", str(tmp_path / "missing.txt")], {})


def test_a_phrase_the_model_cannot_write_stops_the_start(demo_model: Path, tmp_path: Path) -> None:
    path = write(tmp_path, "appointment\n阿里巴巴\n")
    with pytest.raises(SpawnError) as info:
        ServerProcess(demo_model, "--hotwords-file", str(path))
    assert "unsupported_hotword" in str(info.value) and "阿里巴巴" in str(info.value)


def test_a_streams_list_is_refused_when_the_servers_phrases_take_it_over_the_cap(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    # Decoding compiles a stream's phrases with the file's: the cap holds for both.
    tokenizer = Tokenizer.from_file(load_model_dir(tiny_model_dir).tokenizer_path)
    speller = Speller(tokenizer)
    server, own = (
        tuple(
            Hotword(f"{a}{b}{c} account number and routing code {a}{c}")
            for a, b, c in itertools.islice(itertools.product(letters, repeat=3), 450)
        )
        for letters in ("bcdfghjk", "lmnpqrst")
    )
    tokens = sum(len(tokenizer.encode(h.phrase)) for h in (*server, *own))
    alone = max(sum(len(tokenizer.encode(h.phrase)) for h in hs) for hs in (server, own))
    if not alone <= MAX_GRAPH_TOKENS < tokens:  # sized for this tokenizer: say if not
        pytest.fail(f"the lists take {alone} tokens alone and {tokens} together")
    assert speller.refusal(own) is None and speller.refusal(server) is None
    refused = stream_refusal(speller, server, own)
    assert refused is not None and f"at most {MAX_GRAPH_TOKENS}" in refused
    assert stream_refusal(speller, server, own[:20]) is None
    # Every session's check (the core's, OpenAI's codec's, the mint's) is this one.
    path = write(tmp_path, "".join(f"{h.phrase}\n" for h in server))
    config = load_config(["--hotwords-file", str(path)], {})
    report = replace(REPORT, tokenizer=tokenizer.serialized())
    check = session_config(config, report).hotword_refusal
    assert check(own) == refused and check(own[:20]) is None
