"""Session fixtures: the tiny test model (built at test time) and espeak-ng speech clips."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.speech import Clip, make_clips

REPO = Path(__file__).resolve().parent.parent
DEMO_MODEL = REPO / "models" / "demo"


def build_test_model(out: Path, size: str = "tiny", seed: int = 0) -> Path:
    """Run the test-model builder's command line in a child process, as users do."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "engine.model.random_weights",
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


@pytest.fixture(scope="session", autouse=True)
def _private_caches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep every test (and every server it starts) off this user's caches and the hub.

    The tuning and test-model caches go to a temporary folder, and ModelScope points at a
    closed local port, so a runner with a network never downloads the real model and
    results never depend on what an earlier run left behind.
    """
    root = tmp_path_factory.mktemp("caches")
    private = {
        "XDG_CACHE_HOME": str(root / "xdg"),
        "MODELSCOPE_CACHE": str(root / "modelscope"),
        "MODELSCOPE_ENDPOINT": "http://127.0.0.1:9",
    }
    saved = {name: os.environ.get(name) for name in private}
    os.environ.update(private)
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_test_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="module", params=["1", "2"], ids=["1-process", "2-workers"])
def workers(request: pytest.FixtureRequest) -> str:
    """How many worker processes a module's real server runs (`--workers`): the protocol
    suites run against one process and against a supervisor with two workers (issue 36)."""
    value: str = request.param
    return value


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed demo model, seen through a folder of links, with fp32 ONNX beside it.

    The server exports ONNX beside a model it can write to; through the links the export
    lands in a temporary folder, never in the checkout.
    """
    from engine.backends.registry import ensure_onnx  # the engine only for the tests that use it
    from engine.model.directory import DEMO_MODEL_MARKER, load_model_dir

    if not (DEMO_MODEL / DEMO_MODEL_MARKER).is_file():
        pytest.fail(
            f"no demo model in {DEMO_MODEL} (no {DEMO_MODEL_MARKER}): tests that need real "
            "words need it; build it with `python scripts/train_demo_model.py all`",
            pytrace=False,
        )
    view = tmp_path_factory.mktemp("demo-model")
    for item in DEMO_MODEL.iterdir():
        if item.is_file():
            (view / item.name).symlink_to(item)
    ensure_onnx(load_model_dir(view), "fp32")
    return view


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
