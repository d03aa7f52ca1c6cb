"""Session fixtures: the tiny test model (built at test time) and espeak-ng speech clips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.speech import Clip, make_clips

REPO = Path(__file__).resolve().parent.parent


def build_test_model(out: Path, size: str = "tiny", seed: int = 0) -> Path:
    """Run the test-model builder's command line in a child process, as users do."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "engine.test_model",
            "--size",
            size,
            "--out",
            str(out),
            "--seed",
            str(seed),
        ],
        check=True,
    )
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_test_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def full_model_dir() -> Path:
    """The full-size model, only when SENSESTREAM_FULL_MODEL points at a built one."""
    path = os.environ.get("SENSESTREAM_FULL_MODEL")
    if not path:
        pytest.skip("set SENSESTREAM_FULL_MODEL to a full-size model dir")
    return Path(path)


@pytest.fixture(scope="session")
def speech_clips(tmp_path_factory: pytest.TempPathFactory) -> list[Clip]:
    return make_clips(tmp_path_factory.mktemp("speech"))
