"""engine_url: where the engine runs, and the clear error when Ray is missing."""

from __future__ import annotations

import asyncio
import sys

import pytest
from prometheus_client import CollectorRegistry

from server.config import load_config
from server.engine_url import RayAddress, parse_engine_url
from server.engines import RayMissingError, open_remote


def test_engine_urls_name_local_or_a_ray_cluster_and_app() -> None:
    assert parse_engine_url("local") is None
    assert parse_engine_url("ray://auto") == RayAddress("auto", "sensestream")
    assert parse_engine_url("ray://head:10001?app=asr") == RayAddress("ray://head:10001", "asr")
    for bad in ("ray://", "http://head:10001", "ray://auto/path", "auto"):
        with pytest.raises(ValueError, match="engine_url must be"):
            parse_engine_url(bad)


def test_the_engine_flag_and_its_environment_variable_set_engine_url() -> None:
    assert load_config([], {}).engine.engine_url == "local"
    assert load_config(["--engine", "ray://auto"], {}).engine.engine_url == "ray://auto"
    environ = {"SENSESTREAM_ENGINE_URL": "ray://head:10001"}
    assert load_config([], environ).engine.engine_url == "ray://head:10001"
    with pytest.raises(ValueError, match="engine_url must be"):
        load_config(["--engine", "tcp://x"], {})


def test_without_ray_a_remote_engine_is_a_typed_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "engine.ray_serve", None)  # as if Ray were absent
    with pytest.raises(RayMissingError, match=r"pip install '\.\[ray\]'"):
        asyncio.run(open_remote(RayAddress("auto"), CollectorRegistry()))
