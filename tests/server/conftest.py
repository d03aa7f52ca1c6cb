"""A real server process on 127.0.0.1:0 with the tiny model and the real FSMN VAD."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import soundfile as sf

from tests.speech import Clip, three_sentences
from tools.spawn import ServerSpec, SpawnedServer, spawn

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 240.0
#: What each worker process logs once it is ready (`App`).
WORKER_READY = r"ready in [0-9.]+ s"


class ServerProcess:
    """`python -m server` in a subprocess, returned once /readyz says it is ready."""

    def __init__(self, model: Path, *extra: str) -> None:
        self.model = model
        # One process unless a test asks for workers (`auto` would follow the host's cores).
        options = ("--model", str(model), "--precision", "fp32", "--max-batch", "4")
        options += ("--workers", "1")
        spec = ServerSpec(
            (*options, "--log-level", "info", *extra),
            cwd=REPO,
            start_timeout_s=START_TIMEOUT_S,
        )
        self.server = spawn(spec)
        self.args = list(spec.command)
        self.proc = self.server.proc
        self.port = self.server.port

    @property
    def log(self) -> list[str]:
        """Every line the server has printed so far (stdout and stderr)."""
        return self.server.output.lines()

    def wait_for(self, pattern: str, timeout: float = 120.0, count: int = 1) -> re.Match[str]:
        """The `count`th line matching `pattern`, already printed or to come (or fail with
        the log)."""
        found = self.server.output.wait_for(pattern, timeout, count)
        if found is None:
            raise AssertionError(f"no {pattern!r} in server output:\n{''.join(self.log)}")
        return found

    @property
    def url(self) -> str:
        return self.server.url

    def http(self, path: str) -> tuple[int, str]:
        return self.server.get(path)

    def terminate(self) -> None:
        self.server.terminate()

    def stop(self) -> int:
        return self.server.stop()


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, workers: str) -> Iterator[ServerProcess]:
    proc = ServerProcess(tiny_model_dir, "--workers", workers)
    proc.wait_for(WORKER_READY, count=int(workers))  # /readyz: the first worker ready
    yield proc
    proc.stop()


def unready_server(
    python: str,
    *extra: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    entry: tuple[str, ...] = ("-m", "server"),
) -> SpawnedServer:
    """`python -m server` (or another `entry`) on a free port, returned as soon as it says
    where it listens (before any model work); waiting for readiness is the caller's."""
    spec = ServerSpec(
        ("--precision", "fp32", "--max-batch", "1", "--workers", "1", *extra),
        python=python,
        cwd=cwd,
        env=env,
        start_timeout_s=START_TIMEOUT_S,
        entry=entry,
    )
    return SpawnedServer(spec)


@pytest.fixture(scope="module")
def hook_port() -> int:
    """A free port for the webhook receiver, known before the server starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


#: The key of the stream_file.py tests' server (`keyed`).
STREAM_FILE_KEY = "stream-file-key-0123456789"


@pytest.fixture(scope="module")
def keyed(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    """A server that wants `STREAM_FILE_KEY`."""
    proc = ServerProcess(tiny_model_dir, "--api-keys", STREAM_FILE_KEY)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def talk(speech_clips: list[Clip], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three sentences, so three finals (and some partials) from the tiny model."""
    path = tmp_path_factory.mktemp("stream_file") / "talk.wav"
    sf.write(path, three_sentences(speech_clips), 16000, subtype="PCM_16")
    return path


def followable(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a follower is sent of a client's v1 events: not what resuming gives the
    client alone (`ack`, and `ready`'s `resume_token`)."""
    return [
        {k: v for k, v in e.items() if k != "resume_token"} for e in events if e["type"] != "ack"
    ]
