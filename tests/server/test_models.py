"""Which model a server loads: a cached test model at once, a clean error when a build fails."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from engine.errors import ModelNotFoundError
from server import models
from server.config import ServerConfig


@pytest.fixture
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty ModelScope cache; this machine's hub does not answer."""
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms-cache"))


@pytest.mark.usefixtures("offline_hub")
def test_a_built_test_model_is_used_at_once_without_rebuilding(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_build(out: Path, size: str) -> None:
        raise AssertionError("a finished build must not be built again")

    monkeypatch.setattr(models, "build_test_model", no_build)
    config = replace(ServerConfig(), test_model_cache=str(tiny_model_dir))
    started = time.monotonic()
    assert models.choose_model(config, {}) == str(tiny_model_dir)
    assert time.monotonic() - started < 5


@pytest.mark.usefixtures("offline_hub")
def test_a_named_model_never_falls_back(tmp_path: Path) -> None:
    config = replace(ServerConfig(), model=str(tmp_path / "missing"))
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        models.choose_model(config, {})


@pytest.mark.usefixtures("offline_hub")
def test_fallback_builds_the_configured_size_into_the_cache(tmp_path: Path) -> None:
    config = replace(ServerConfig(), test_model_size="tiny")
    chosen = Path(models.choose_model(config, {"XDG_CACHE_HOME": str(tmp_path)}))
    assert chosen == tmp_path / "sensestream" / "models" / "test-tiny"
    assert models.is_built(chosen)
    assert not list(chosen.parent.glob(".test-tiny.building-*")), "staging folder left behind"


def test_a_failed_build_is_a_model_error_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "models" / "test-bogus"
    with pytest.raises(ModelNotFoundError, match="could not build the test model"):
        models.build_test_model(out, "bogus")  # the builder refuses the size and exits 2
    assert not out.exists()
    assert list(out.parent.iterdir()) == []
