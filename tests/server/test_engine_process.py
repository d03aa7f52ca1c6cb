"""An engine in its own process on this host, and a server attached to it (`--engine unix:`)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sensestream.client import Outcome, run_session
from server.engines.attach import is_remote
from server.engines.url import UnixSockets, parse_engine_url
from tests.server.conftest import REPO
from tests.server.inprocess import serving
from tests.speech import Clip, three_sentences, to_s16le
from tools.spawn import Output, start_followed

START_TIMEOUT_S = 240.0
LISTENING = r"SenseStream engine listening on unix:(\S+)"


@dataclass
class EngineProcess:
    proc: subprocess.Popen[str]
    output: Output
    path: str


@pytest.fixture
def engine_process(tiny_model_dir: Path) -> Iterator[EngineProcess]:
    # Not pytest's tmp_path: a socket's whole path must fit in 107 bytes.
    with tempfile.TemporaryDirectory(prefix="ss-") as folder:
        path = os.path.join(folder, "engine.sock")
        command = [
            sys.executable,
            *("-m", "server.engines.process", "--socket", path),
            *("--model", str(tiny_model_dir), "--test-model-size", "tiny"),
            *("--precision", "fp32", "--max-batch", "4"),
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc, output = start_followed(command, cwd=REPO, env=env)
        try:
            found = output.wait_for(LISTENING, START_TIMEOUT_S)
            assert found is not None, output.tail()
            assert found.group(1) == path
            yield EngineProcess(proc, output, path)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)


def test_unix_engine_urls_name_one_socket_per_engine() -> None:
    assert parse_engine_url("unix:/run/e0.sock") == UnixSockets(("/run/e0.sock",))
    assert parse_engine_url("unix:/run/e0.sock,/run/e1.sock") == UnixSockets(
        ("/run/e0.sock", "/run/e1.sock")
    )
    for bad in ("unix:", "unix:/a,,/b", "unix:/a,"):
        with pytest.raises(ValueError, match="engine_url must be"):
            parse_engine_url(bad)


def finals_of(outcome: Outcome) -> list[tuple[int, int, str]]:
    """A finished session's finals as (start_ms, end_ms, text)."""
    errors = [e for e in outcome.events if e["type"] == "error"]
    assert outcome.events[-1]["type"] == "end" and outcome.close_code == 1000, errors
    return [(f["start_ms"], f["end_ms"], f["text"]) for f in outcome.of("final")]


def test_a_server_on_an_engine_process_gives_the_finals_of_an_in_process_engine(
    engine_process: EngineProcess, tiny_model_dir: Path, speech_clips: list[Clip]
) -> None:
    audio = to_s16le(three_sentences(speech_clips))

    async def finals(**options: str) -> list[tuple[int, int, str]]:
        async with serving(tiny_model_dir, max_batch="4", **options) as (app, url):
            outcome = await run_session(url, audio, chunk=3200, speed=50)
            if "engine_url" in options:
                assert app.engine is not None and is_remote(app.engine)
                assert app.engine.snapshot().batches > 0  # the engine process decoded them
            return finals_of(outcome)

    remote = asyncio.run(finals(engine_url=f"unix:{engine_process.path}"))
    local = asyncio.run(finals())
    assert len(local) == 3
    assert remote == local

    engine_process.proc.send_signal(signal.SIGTERM)
    assert engine_process.proc.wait(60) == 0, engine_process.output.tail()
    assert not Path(engine_process.path).exists()
