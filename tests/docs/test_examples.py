"""The README's and the docs' marked examples, run as written against a live server.

A fenced block right after an `<!-- example -->` comment is run: `sh` blocks with bash
(`set -e`), `python` blocks with this interpreter, one document's blocks in order in one
folder, so a later block uses the files an earlier one made. `<!-- example background -->`
starts a block and goes on (a follower waiting for a stream that a later block starts);
`<!-- example expect="TEXT" -->` also asks for TEXT in the block's output. The README's first
example (the speech) runs first in every other document's folder. The server runs
the demo model, so the outputs the docs show are what a reader gets. Only the address
(`127.0.0.1:8765`), `.venv/bin/` and `scripts/` are rewritten to this checkout's.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.server.conftest import ServerProcess

REPO = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/protocol.md", "docs/callcentre.md")
BLOCK = re.compile(
    r"<!-- example(?P<opts>[^>]*?)-->\n```(?P<lang>sh|python)\n(?P<body>.*?)\n```", re.S
)
#: One block's limit: the longest streams a recording in real time (about 10 s).
BLOCK_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Example:
    """One marked block of a document."""

    doc: str
    line: int
    lang: str
    body: str
    background: bool
    expect: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def examples(doc: str) -> list[Example]:
    """The marked blocks of `doc`, in order."""
    text = (REPO / doc).read_text(encoding="utf-8")
    found = []
    for match in BLOCK.finditer(text):
        opts = match.group("opts")
        found.append(
            Example(
                doc=doc,
                line=text.count("\n", 0, match.start()) + 1,
                lang=match.group("lang"),
                body=match.group("body"),
                background="background" in shlex.split(opts),
                expect=tuple(re.findall(r'expect="([^"]*)"', opts)),
            )
        )
    return found


def localised(body: str, port: int) -> str:
    """The block as this checkout and this test's server need it."""
    body = body.replace("127.0.0.1:8765", f"127.0.0.1:{port}")
    body = body.replace(".venv/bin/", f"{Path(sys.executable).parent}/")
    return re.sub(r"(?<![\w/.])scripts/", f"{REPO}/scripts/", body)


def start(example: Example, port: int, folder: Path) -> subprocess.Popen[str]:
    """Run one block in `folder`, its output captured."""
    body = localised(example.body, port)
    if example.lang == "sh":
        command = ["bash", "-e", "-o", "pipefail", "-c", body]
    else:
        script = folder / f"example_{example.line}.py"
        script.write_text(body, encoding="utf-8")
        command = [sys.executable, str(script)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SENSESTREAM_")}
    return subprocess.Popen(
        command, cwd=folder, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def finish(example: Example, proc: subprocess.Popen[str]) -> None:
    """Wait for a block; fail with its output if it failed or missed what it expects."""
    try:
        output, _ = proc.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        pytest.fail(f"{example.where} ran past {BLOCK_TIMEOUT_S:.0f} s:\n{output}")
    if proc.returncode != 0:
        pytest.fail(f"{example.where} exited {proc.returncode}:\n{output}")
    for text in example.expect:
        assert text in output, f"{example.where}: no {text!r} in its output:\n{output}"


@pytest.fixture(scope="module")
def server(demo_model: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(demo_model)
    yield proc
    proc.stop()


@pytest.mark.parametrize("doc", DOCS)
def test_a_documents_examples_run_as_written(
    doc: str, server: ServerProcess, tmp_path: Path
) -> None:
    found = examples(doc)
    assert found, f"{doc} has no <!-- example --> blocks"
    if doc != "README.md":
        # The README's first example makes the speech the other documents' examples use.
        speech = examples("README.md")[0]
        finish(speech, start(speech, server.port, tmp_path))
    waiting: list[tuple[Example, subprocess.Popen[str]]] = []
    for example in found:
        proc = start(example, server.port, tmp_path)
        if example.background:
            waiting.append((example, proc))
        else:
            finish(example, proc)
    for example, proc in waiting:
        finish(example, proc)


def test_the_marker_finds_blocks_and_their_options() -> None:
    text = (
        'x\n<!-- example background expect="a b" -->\n```sh\necho "a b"\n```\n'
        "```sh\nnot marked\n```\n<!-- example -->\n```python\nprint(1)\n```\n"
    )
    found = [m.groupdict() for m in BLOCK.finditer(text)]
    assert [f["lang"] for f in found] == ["sh", "python"]
    assert found[0]["body"] == 'echo "a b"'
    assert re.findall(r'expect="([^"]*)"', found[0]["opts"]) == ["a b"]


def test_localised_rewrites_only_the_address_and_the_checkout_paths() -> None:
    body = ".venv/bin/python scripts/stream_file.py x.wav --url ws://127.0.0.1:8765/ws"
    out = localised(body, 4321)
    assert f"{REPO}/scripts/stream_file.py" in out and "127.0.0.1:4321/ws" in out
    assert out.startswith(f"{Path(sys.executable).parent}/python ")
    assert localised("my_scripts/x tools/scripts/y", 1) == "my_scripts/x tools/scripts/y"
