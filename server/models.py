"""Which model the server loads: the configured one, or a cached random-weight test model."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from engine.builder import EngineConfig
from engine.errors import ModelNotFoundError
from engine.loader import BackendOptions
from engine.model_dir import DEFAULT_MODEL_ID, TEST_MODEL_MARKER, resolve_model
from server.config import ServerConfig, cache_home, default_test_model_cache

log = logging.getLogger("sensestream.models")


def choose_model(config: ServerConfig, environ: Mapping[str, str]) -> str:
    """The model spec to load.

    Only the default id falls back: a user who names a model gets an error, not a stand-in.
    """
    try:
        return str(resolve_model(config.model).path)
    except ModelNotFoundError as exc:
        if not config.fallback_test_model or config.model != DEFAULT_MODEL_ID:
            raise
        log.warning("no real SenseVoiceSmall: %s", str(exc).split(". ", 1)[0])
    size = config.test_model_size
    cache = Path(config.test_model_cache or default_test_model_cache(environ, size))
    if not is_built(cache):
        log.warning("building the %s TEST model with RANDOM weights in %s (once)", size, cache)
        build_test_model(cache, size)
    return str(cache)


def is_built(path: Path) -> bool:
    """A finished test-model build: the marker is written last."""
    return (path / TEST_MODEL_MARKER).is_file() and (path / "model.pt").is_file()


def build_test_model(out: Path, size: str) -> None:
    """Build into a private folder, then move it into place, so no half-built model is used.

    The builder runs in a child process: it peaks at about 3 GB, which this long-lived
    process should not keep. Its report goes to stderr, keeping stdout for announcements.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.with_name(f".{out.name}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        subprocess.run(
            [sys.executable, "-m", "engine.test_model", "--size", size, "--out", str(staging)],
            check=True,
            stdout=sys.stderr,
        )
        if not is_built(out):  # another server may have finished first
            shutil.rmtree(out, ignore_errors=True)
            staging.rename(out)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ModelNotFoundError(f"could not build the test model in {out}: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def engine_config(config: ServerConfig, model: str, environ: Mapping[str, str]) -> EngineConfig:
    """The engine's settings for the chosen model."""
    backend = BackendOptions(
        backend=config.backend,
        precision=config.precision,
        device=config.device,
        threads=None if config.threads is None else int(config.threads),
        tensorrt=config.tensorrt,
    )
    return EngineConfig(
        model=model,
        backend=backend,
        max_batch=config.max_batch_value,
        max_wait_ms=config.max_wait_ms,
        memory_budget=config.memory_budget_bytes,
        budget_fraction=config.budget_fraction,
        max_segment_ms=config.max_segment_ms,
        tuning_cache=cache_home(environ) / "tuning" if config.reuse_tuning else None,
    )
