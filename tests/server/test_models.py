"""Which model a server loads: a cached test model at once, a clean error when a build fails."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from engine.errors import ModelNotFoundError
from engine.model.directory import DEMO_MODEL_MARKER
from server.config import EngineSettings
from server.engines import models


@pytest.fixture
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty ModelScope cache; this machine's hub does not answer."""
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms-cache"))


@pytest.mark.usefixtures("offline_hub")
def test_a_built_test_model_is_used_at_once_without_rebuilding(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def no_build(out: Path, size: str) -> None:
        raise AssertionError("a finished build must not be built again")

    monkeypatch.setattr(models, "build_test_model", no_build)
    config = EngineSettings(test_model_cache=str(tiny_model_dir))
    started = time.monotonic()
    assert asyncio.run(models.choose_model(config, {})) == str(tiny_model_dir)
    assert time.monotonic() - started < 5


@pytest.mark.usefixtures("offline_hub")
def test_a_named_model_never_falls_back(tmp_path: Path) -> None:
    config = EngineSettings(model=str(tmp_path / "missing"))
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        asyncio.run(models.choose_model(config, {}))


@pytest.mark.usefixtures("offline_hub")
def test_without_real_weights_the_clones_demo_model_is_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    demo = tmp_path / "demo"
    demo.mkdir()
    (demo / DEMO_MODEL_MARKER).write_text("{}")
    monkeypatch.setattr(models, "demo_model_dir", lambda: demo)
    assert asyncio.run(models.choose_model(EngineSettings(), {})) == str(demo)
    # Asking for a test-model cache asks for the test model.
    built: list[Path] = []

    async def build(out: Path, size: str) -> None:
        built.append(out)

    monkeypatch.setattr(models, "build_test_model", build)
    cache = EngineSettings(test_model_cache=str(tmp_path / "test"), test_model_size="tiny")
    assert asyncio.run(models.choose_model(cache, {})) == str(tmp_path / "test")
    assert built == [tmp_path / "test"]


def test_the_clone_carries_the_demo_model() -> None:
    assert (models.demo_model_dir() / DEMO_MODEL_MARKER).is_file()


@pytest.mark.usefixtures("offline_hub")
def test_fallback_builds_the_configured_size_into_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(models, "demo_model_dir", lambda: tmp_path / "no-demo")  # a wheel
    config = EngineSettings(test_model_size="tiny")
    chosen = Path(asyncio.run(models.choose_model(config, {"XDG_CACHE_HOME": str(tmp_path)})))
    assert chosen == tmp_path / "sensestream" / "models" / "test-tiny"
    assert models.is_built(chosen)
    assert not list(chosen.parent.glob(".test-tiny.building-*")), "staging folder left behind"


def test_a_failed_build_is_a_model_error_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "models" / "test-bogus"
    with pytest.raises(ModelNotFoundError, match="could not build the test model"):
        asyncio.run(models.build_test_model(out, "bogus"))  # the builder exits 2
    assert not out.exists()
    assert list(out.parent.iterdir()) == []


def test_a_folder_that_is_not_a_test_model_cache_is_never_replaced(tmp_path: Path) -> None:
    precious = tmp_path / "my-models"
    precious.mkdir()
    (precious / "model.pt").write_bytes(b"real weights")
    with pytest.raises(ModelNotFoundError, match="not a test-model cache"):
        asyncio.run(models.build_test_model(precious, "tiny"))
    assert (precious / "model.pt").read_bytes() == b"real weights"


def test_abandoned_staging_folders_are_removed(tmp_path: Path) -> None:
    out = tmp_path / "test-tiny"
    dead = tmp_path / ".test-tiny.building-999999999"  # no such process
    dead.mkdir()
    (dead / "model.pt").write_bytes(b"half")
    asyncio.run(models.build_test_model(out, "tiny"))
    assert models.is_built(out)
    assert not dead.exists()


def test_shutdown_during_a_build_stops_the_builder_and_cleans_up(tmp_path: Path) -> None:
    out = tmp_path / "test-full"

    async def cancel_mid_build() -> None:
        build = asyncio.create_task(models.build_test_model(out, "full"))
        staging = tmp_path / f".test-full.building-{os.getpid()}"
        async with asyncio.timeout(60):
            while not staging.exists():  # the builder creates it once it starts writing
                await asyncio.sleep(0.05)
        build.cancel()
        with pytest.raises(asyncio.CancelledError):
            await build

    started = time.monotonic()
    asyncio.run(cancel_mid_build())
    assert time.monotonic() - started < 30, "the builder was stopped, not waited for"
    assert list(tmp_path.iterdir()) == []
