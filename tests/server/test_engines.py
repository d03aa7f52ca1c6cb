"""engine_url: where the engine runs, and the clear error when Ray is missing."""

from __future__ import annotations

import asyncio
import sys

import pytest
from prometheus_client import CollectorRegistry

from server.config import load_config
from server.engines.attach import RayMissingError, open_remote
from server.engines.url import RayAddress, parse_engine_url


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
    monkeypatch.setitem(sys.modules, "engine.remote.ray_serve", None)  # as if Ray were absent
    with pytest.raises(RayMissingError, match=r"pip install '\.\[ray\]'"):
        asyncio.run(open_remote(RayAddress("auto"), CollectorRegistry()))


def test_a_gateway_with_no_replica_answering_refuses_new_streams() -> None:
    from starlette.requests import HTTPConnection

    from engine.remote.gateway import RemoteEngine
    from server.app import App
    from server.config import ServerConfig
    from tests.engine.remote_fakes import LoopbackTransport, fake_replica

    async def main() -> tuple[str | None, str | None]:
        app = App(ServerConfig.from_options(engine_url="ray://auto"), {})
        transport = LoopbackTransport()
        engine = RemoteEngine(transport)
        engine.start()
        app.engine, app.state = engine, "ready"
        # A real scope always has a query: a client secret may ride in it, on any server.
        scope = {"type": "websocket", "headers": [], "path": "/ws", "query_string": b""}
        conn = HTTPConnection(scope)
        before = app.refusal(conn)
        transport.add(fake_replica("r0", asyncio.Event()))
        await asyncio.wait_for(engine.attached(), 5)
        after = app.refusal(conn)
        await engine.close(timeout=1)
        return (
            None if before is None else bytes(before.body).decode(),
            None if after is None else bytes(after.body).decode(),
        )

    before, after = asyncio.run(main())
    assert before == "no engine replica answers\n"
    assert after is None
