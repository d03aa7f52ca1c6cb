"""Start either server for a load run: ours (`python -m server`) or sherpa-onnx's
`non_streaming_server.py` from its python-api-examples, run by the side environment."""

from __future__ import annotations

import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tools.spawn import ServerSpec, SpawnError, spawn, start_followed

START_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class Running:
    """A started server: where clients connect, and the process to read CPU time from."""

    url: str
    pid: int


@contextmanager
def ours(model: Path, args: tuple[str, ...]) -> Iterator[Running]:
    """Our server, ready; its FunASR route is where whole utterances go."""
    with spawn(ServerSpec(args=("--model", str(model), *args))) as server:
        yield Running(f"ws://127.0.0.1:{server.port}/funasr", server.proc.pid)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def missing_examples(examples: Path) -> list[Path]:
    """What sherpa-onnx's server needs from python-api-examples/ and `examples` lacks."""
    needed = ("non_streaming_server.py", "http_server.py", "web")
    return [examples / name for name in needed if not (examples / name).exists()]


@contextmanager
def sherpa(
    python: Path, examples: Path, model: Path, tokens: Path, args: tuple[str, ...]
) -> Iterator[Running]:
    """sherpa-onnx's server with our weights in its layout; it writes its log/ in a temp dir.

    `examples` is python-api-examples/ of a sherpa-onnx checkout (the script, its
    http_server.py and web/)."""
    absent = missing_examples(examples)
    if absent:
        raise FileNotFoundError(f"{examples} lacks {', '.join(p.name for p in absent)}")
    script = examples / "non_streaming_server.py"
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="sherpa-server-") as work:
        command = [str(python), str(script), "--sense-voice", str(model), "--tokens", str(tokens)]
        # Its HTTP side serves the example pages, which must exist even though no one asks.
        command += ["--port", str(port), "--doc-root", str(examples / "web"), *args]
        proc, output = start_followed(command, cwd=work)
        try:
            # It logs the addresses it serves once its socket is bound.
            if output.wait_for(rf"localhost:{port}\b", START_TIMEOUT_S) is None:
                raise SpawnError(f"sherpa-onnx's server did not start:\n{output.tail()}")
            yield Running(f"ws://127.0.0.1:{port}", proc.pid)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            output.join(timeout_s=5.0)
