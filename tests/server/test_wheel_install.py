"""A built wheel, installed into a fresh venv far from the checkout, serves the page and speech.

This is the path a user takes with `pip install sensestream`: nothing beside it, the repository
not on `sys.path`, no test model yet. The venv borrows this environment's third-party
packages through a `.pth` line (installing torch again would take minutes), but not its
editable install of this project, so every `engine`/`server`/`web_client` import must come
from the wheel.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from sensestream.client import run_session
from tests.server.conftest import REPO, unready_server
from tests.speech import Clip, to_s16le

SR = 16000
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "models", "test-artifacts", "__pycache__",
    ".pytest_cache", ".mypy_cache", ".ruff_cache", "*.onnx", "*.pt",
)  # fmt: skip


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (in a folder with nothing beside it) holding only the built wheel."""
    root = tmp_path_factory.mktemp("clone-alone")
    # Built from a copy: an in-tree build would leave build/ in the checkout, and a stale
    # build/lib there could slip removed files into a later wheel.
    source = Path(shutil.copytree(REPO, root / "source", ignore=NOT_SOURCE))
    dist = root / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(source),
        ],
        check=True,
        cwd=root,
    )
    wheels = list(dist.glob("sensestream-*.whl"))
    assert len(wheels) == 1, wheels
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # A plain path line: the borrowed folder's own .pth files (our editable install) stay off.
    (site / "borrowed-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            "--target",
            str(site),
            str(wheels[0]),
        ],
        check=True,
        cwd=root,
    )
    return python


def test_the_wheel_installs_the_product_packages_and_the_command_only(installed: Path) -> None:
    (wheel,) = (installed.parent.parent.parent / "dist").glob("sensestream-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert top == {"engine", "streaming", "server", "web_client", "sensestream"}, top
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    with zipfile.ZipFile(wheel) as archive:
        assert "sensestream = sensestream.cli:main" in archive.read(entry_points).decode()
    alone = installed.parent.parent.parent  # a folder with no checkout in it
    tools = run([str(installed), "-c", "import tools"], cwd=alone)
    assert tools.returncode == 1 and "No module named 'tools'" in tools.stderr
    version = run([str(installed), "-m", "sensestream", "--version"], cwd=alone)
    assert (version.returncode, version.stdout) == (0, "sensestream 0.1.0\n")


def run(command: list[str], **options: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, check=False, capture_output=True, text=True, **options)


def test_the_wheel_carries_the_packages_and_their_data(installed: Path) -> None:
    code = (
        "import engine, server, streaming, sensestream, web_client\n"
        "from engine.model.random_weights import assets\n"
        "from server.http.responses import web_root\n"
        "print(engine.__file__)\n"
        "print(assets())\n"
        "print(web_root())\n"
    )
    out = subprocess.run(
        [str(installed), "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=installed.parent.parent.parent,
    ).stdout.split()
    assert Path(out[0]).is_relative_to(installed.parent.parent), "engine must come from the wheel"
    assert not Path(out[0]).is_relative_to(REPO)
    # Every data file of the checkout is in the wheel: the model's small files, the
    # tokenizer corpus and each file the server would serve.
    for source, packaged in (
        (REPO / "engine" / "model" / "assets", out[1]),
        (REPO / "web_client", out[2]),
    ):
        wanted = {
            p.relative_to(source)
            for p in source.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc", ".md")
        }
        assert wanted, source
        missing = [str(p) for p in wanted if not (Path(packaged) / p).is_file()]
        assert not missing, missing


def sensestream(python: Path, *args: str, cwd: Path, env: dict[str, str]) -> list[str]:
    """`sensestream ARGS` from the wheel (as its console script runs it): stdout's lines."""
    done = run([str(python), "-m", "sensestream", *args], cwd=cwd, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout.splitlines()


def test_installed_command_serves_streams_and_transcribes(
    installed: Path, speech_clips: list[Clip]
) -> None:
    root = installed.parent.parent.parent
    env = {"PATH": "/usr/bin:/bin", "HOME": str(root), "XDG_CACHE_HOME": str(root / "cache")}
    entry = ("-m", "sensestream", "serve")
    proc = unready_server(
        str(installed), "--test-model-size", "tiny", cwd=root, env=env, entry=entry
    )
    port = proc.port
    audio = np.concatenate([np.zeros(SR // 2, np.float32), speech_clips[0].audio, np.zeros(SR)])
    recording = root / "speech.wav"
    sf.write(recording, audio, SR, subtype="PCM_16")
    try:
        proc.wait_ready()
        status, page = proc.get("/")
        assert status == 200 and "<html" in page.lower()
        outcome = asyncio.run(run_session(f"ws://127.0.0.1:{port}/ws", to_s16le(audio)))
        url = f"ws://127.0.0.1:{port}/ws"
        streamed = sensestream(
            installed, "stream", str(recording), "--url", url, "--speed", "0", "--format",
            "jsonl", cwd=root, env=env,
        )  # fmt: skip
    finally:
        status = proc.stop()
    stderr = proc.output.text("stderr")
    assert len(outcome.of("final")) == 1, outcome.events
    assert outcome.of("final")[0]["text"]
    assert outcome.of("ready")[0]["test_model"] is True
    model = root / "cache" / "sensestream" / "models" / "test-tiny"
    assert (model / "model.pt").is_file()
    assert status == 0, stderr
    assert "Traceback" not in stderr
    # `sensestream stream` gave the recording's final, as the v1 session did.
    finals = [json.loads(line) for line in streamed]
    assert [f["text"] for f in finals] == [outcome.of("final")[0]["text"]]
    # `sensestream transcribe` prints JSON lines and nothing else: one for the file.
    printed = sensestream(
        installed, "transcribe", str(recording), "--model", str(model), "--precision", "fp32",
        cwd=root, env=env,
    )  # fmt: skip
    (line,) = printed
    assert json.loads(line)["text"]
