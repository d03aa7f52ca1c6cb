"""Which model the server loads: the configured one, else the clone's demo model, else a
cached random-weight test model."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from engine.errors import ModelNotFoundError
from engine.model.directory import (
    DEFAULT_MODEL_ID,
    DEMO_MODEL_MARKER,
    TEST_MODEL_MARKER,
    resolve_model,
)
from server.config import EngineSettings, cache_home, default_test_model_cache

log = logging.getLogger("sensestream.models")
STOP_BUILDER_S = 10.0


async def choose_model(engine: EngineSettings, environ: Mapping[str, str]) -> str:
    """The model spec to load.

    Only the default id falls back: a user who names a model gets an error, not a stand-in.
    """
    try:
        return str((await asyncio.to_thread(resolve_model, engine.model)).path)
    except ModelNotFoundError as exc:
        if not engine.fallback_test_model or engine.model != DEFAULT_MODEL_ID:
            raise
        log.warning("no real SenseVoiceSmall: %s", str(exc).split(". ", 1)[0])
    demo = demo_model_dir()
    if (demo / DEMO_MODEL_MARKER).is_file() and engine.test_model_cache is None:
        log.warning("using the DEMO model in %s (synthetic speech, small vocabulary)", demo)
        return str(demo)
    size = engine.test_model_size
    cache = Path(engine.test_model_cache or default_test_model_cache(environ, size))
    if not is_built(cache):
        log.warning("building the %s TEST model with RANDOM weights in %s (once)", size, cache)
        await build_test_model(cache, size)
    return str(cache)


def demo_model_dir() -> Path:
    """The demo model a clone carries (models/demo/); absent from an installed wheel."""
    return Path(__file__).resolve().parents[2] / "models" / "demo"


def is_built(path: Path) -> bool:
    """A finished test-model build: the marker is written last."""
    return (path / TEST_MODEL_MARKER).is_file() and (path / "model.pt").is_file()


async def build_test_model(out: Path, size: str) -> None:
    """Build in a child process into a private folder, then move it into place.

    The child peaks at about 3 GB, which this long-lived process should not keep; it runs
    in its own session, so a Ctrl-C meant for the server does not kill it half-way, and a
    shutdown during the build stops it and removes its folder.
    """
    try:
        _refuse_foreign(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned_builds(out)
        staging = out.with_name(f".{out.name}.building-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            await _run_builder(size, staging)
            _move_into_place(staging, out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:
        raise ModelNotFoundError(f"could not build the test model in {out}: {exc}") from exc


async def _run_builder(size: str, staging: Path) -> None:
    args = ["-m", "engine.model.random_weights", "--size", size, "--out", str(staging)]
    # Its report goes to our stderr (fd 2): stdout is kept for our own announcements.
    child = await asyncio.create_subprocess_exec(
        sys.executable, *args, stdout=2, start_new_session=True
    )
    try:
        code = await child.wait()
    except asyncio.CancelledError:
        child.terminate()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(child.wait(), STOP_BUILDER_S)
        if child.returncode is None:
            child.kill()
        raise
    if code != 0:
        raise ChildProcessError(f"the builder exited with status {code}")


def _refuse_foreign(out: Path) -> None:
    """Never replace a folder that is not ours (say, a real model given as the cache)."""
    if out.is_dir() and any(out.iterdir()) and not (out / TEST_MODEL_MARKER).is_file():
        raise ModelNotFoundError(
            f"{out} holds files but is not a test-model cache; refusing to replace it "
            "(choose another --test-model-cache)"
        )


def _remove_abandoned_builds(out: Path) -> None:
    """Staging folders of builders whose server died (a build is about a gigabyte)."""
    for folder in out.parent.glob(f".{out.name}.building-*"):
        pid = folder.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def _move_into_place(staging: Path, out: Path) -> None:
    if is_built(out):
        return  # another server finished first: keep the model it may be loading
    _refuse_foreign(out)
    shutil.rmtree(out, ignore_errors=True)
    try:
        staging.rename(out)
    except OSError:
        if not is_built(out):  # lost a race to another server, which is fine
            raise


def tuning_folder(environ: Mapping[str, str]) -> Path:
    """Where CPU start-ups keep what they measured (used when reuse_tuning is on)."""
    return cache_home(environ) / "tuning"
