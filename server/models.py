"""Which model the server loads: the configured one, or a cached random-weight test model."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from engine.errors import ModelNotFoundError
from engine.model_dir import DEFAULT_MODEL_ID, TEST_MODEL_MARKER, resolve_model
from server.config import ServerConfig, default_test_model_cache

log = logging.getLogger("sensestream.models")
MAKE_TEST_MODEL = Path(__file__).resolve().parent.parent / "scripts" / "make_test_model.py"


def choose_model(config: ServerConfig, environ: Mapping[str, str]) -> str:
    """The model spec to load.

    Only the default id falls back: a user who names a model gets an error, not a stand-in.
    """
    try:
        return str(resolve_model(config.model).path)
    except ModelNotFoundError:
        if not config.fallback_test_model or config.model != DEFAULT_MODEL_ID:
            raise
    cache = Path(config.test_model_cache or default_test_model_cache(environ))
    if not (cache / TEST_MODEL_MARKER).is_file() or not (cache / "model.pt").is_file():
        log.warning(
            "no real SenseVoiceSmall found (%s); building the full-size TEST model with "
            "RANDOM weights in %s (once)",
            config.model,
            cache,
        )
        build_test_model(cache)
    return str(cache)


def build_test_model(out: Path) -> None:
    """Run the same builder users run, into `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, str(MAKE_TEST_MODEL), "--size", "full", "--out", str(out)], check=True
    )
