"""Behind a proxy: the client address comes from X-Forwarded-For or Forwarded, only when the
peer is a trusted proxy (--forwarded-allow-ips), and the per-IP session cap follows it."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from server.config import ServerConfig, load_config
from server.http.client_address import (
    Forwarded,
    ForwardedHeader,
    TrustedProxies,
    forwarded_client,
    proxied_client,
)
from tests.server.conftest import ServerProcess

TIMEOUT_S = 60.0
PROXIES = "127.0.0.1, 10.0.0.0/8"


@pytest.fixture(scope="module")
def proxied(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    """A server behind trusted proxies (127.0.0.1 and 10/8) with one session per address."""
    proc = ServerProcess(
        tiny_model_dir, "--forwarded-allow-ips", PROXIES, "--max-sessions-per-ip", "1"
    )
    yield proc
    proc.stop()


async def first_event(
    stack: contextlib.AsyncExitStack, url: str, headers: dict[str, str], local: str
) -> str:
    """Open a v1 session from `local` with `headers` (kept open on `stack`): `ready` when
    admitted, else the error code that refused it."""
    ws: ClientConnection = await stack.enter_async_context(
        connect(url, additional_headers=headers, local_addr=(local, 0))
    )
    with contextlib.suppress(ConnectionClosed):  # a refused one may be closed already
        await ws.send(json.dumps({"type": "start"}))
    event = json.loads(await ws.recv())
    return str(event.get("code", event["type"]))


def sessions(url: str, *opens: tuple[dict[str, str], str]) -> list[str]:
    """Open each (headers, local address) in turn, all held until the last has answered."""

    async def scenario() -> list[str]:
        async with contextlib.AsyncExitStack() as stack:
            return [await first_event(stack, url, headers, local) for headers, local in opens]

    return asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


def xff(value: str) -> dict[str, str]:
    return {"X-Forwarded-For": value}


def test_a_trusted_proxy_gives_each_forwarded_client_its_own_session_cap(
    proxied: ServerProcess,
) -> None:
    seen = sessions(
        proxied.url,
        (xff("198.51.100.1"), "127.0.0.1"),
        (xff("198.51.100.2"), "127.0.0.1"),  # another client through the same proxy
        (xff("198.51.100.1"), "127.0.0.1"),  # the first client again: over its cap of 1
    )
    assert seen == ["ready", "ready", "server_full"]


def test_forwarding_headers_from_an_untrusted_peer_are_ignored(proxied: ServerProcess) -> None:
    seen = sessions(
        proxied.url,
        (xff("198.51.100.3"), "127.0.0.2"),
        (xff("198.51.100.4"), "127.0.0.2"),  # still 127.0.0.2, whatever it claims
        ({"Forwarded": "for=198.51.100.5"}, "127.0.0.2"),
    )
    assert seen == ["ready", "server_full", "server_full"]


def test_a_forged_entry_left_of_the_client_does_not_change_it(proxied: ServerProcess) -> None:
    # 10.1.2.3 is a trusted inner proxy: the client is the right-most address not trusted.
    seen = sessions(
        proxied.url,
        (xff("203.0.113.1, 10.1.2.3"), "127.0.0.1"),
        (xff("192.0.2.99, 203.0.113.1, 10.1.2.3"), "127.0.0.1"),  # forged 192.0.2.99
        (xff("203.0.113.2, 10.1.2.3"), "127.0.0.1"),
    )
    assert seen == ["ready", "server_full", "ready"]


def test_an_rfc_7239_forwarded_header_names_the_client(proxied: ServerProcess) -> None:
    seen = sessions(
        proxied.url,
        ({"Forwarded": "for=198.51.100.20;proto=https"}, "127.0.0.1"),
        ({"Forwarded": 'for="[2001:db8::1]:4711", for=10.9.9.9'}, "127.0.0.1"),
        ({"Forwarded": "for=192.0.2.1, for=198.51.100.20"}, "127.0.0.1"),  # first again
    )
    assert seen == ["ready", "ready", "server_full"]


def test_a_clients_x_forwarded_for_cannot_override_a_proxys_forwarded(
    proxied: ServerProcess,
) -> None:
    # The proxy (127.0.0.1) writes only `Forwarded`; the client's own X-Forwarded-For
    # passes through it. A fresh forged XFF per connection must not be a fresh address.
    seen = sessions(
        proxied.url,
        ({"Forwarded": "for=198.51.100.40", "X-Forwarded-For": "203.0.113.41"}, "127.0.0.1"),
        ({"Forwarded": "for=198.51.100.40", "X-Forwarded-For": "203.0.113.42"}, "127.0.0.1"),
        ({"Forwarded": "for=198.51.100.40"}, "127.0.0.1"),  # without XFF: its own address
    )
    assert seen == ["ready", "server_full", "ready"]


def test_a_clients_forwarded_cannot_override_a_proxys_x_forwarded_for(
    proxied: ServerProcess,
) -> None:
    # The reverse: a proxy that writes only X-Forwarded-For (the nginx example in
    # docs/deploy.md) passes the client's own `Forwarded` through.
    seen = sessions(
        proxied.url,
        ({"X-Forwarded-For": "198.51.100.50", "Forwarded": "for=203.0.113.51"}, "127.0.0.1"),
        ({"X-Forwarded-For": "198.51.100.50", "Forwarded": "for=203.0.113.52"}, "127.0.0.1"),
    )
    assert seen == ["ready", "server_full"]


TRUSTED = TrustedProxies.parse("10.0.0.0/8")


@pytest.mark.parametrize(
    ("xff", "forwarded", "client"),
    [
        # A proxy that writes both: they agree, and Forwarded's proto is kept.
        ("198.51.100.1", "for=198.51.100.1;proto=https", Forwarded("198.51.100.1", 0, "https")),
        # Only one header: the right-most untrusted entry, as before.
        ("198.51.100.2, 10.0.0.9", None, Forwarded("198.51.100.2")),
        (None, "for=198.51.100.3, for=10.0.0.9", Forwarded("198.51.100.3")),
        # They name different clients: one of them is the client's own; neither is believed.
        ("203.0.113.9", "for=198.51.100.4", None),
        ("198.51.100.5", "for=203.0.113.9", None),
        ("203.0.113.9", "for=unknown", None),
        # A header that names only trusted hops hands the walk on to the other one: a
        # Forwarded-writing proxy behind one that writes XFF, and the reverse.
        ("198.51.100.6", "for=10.0.0.7", Forwarded("198.51.100.6")),
        ("10.0.0.7", "for=198.51.100.7", Forwarded("198.51.100.7")),
        ("10.0.0.1", "for=10.0.0.2", Forwarded("10.0.0.1")),  # all trusted: the left-most
        # A Forwarded header a client made malformed (a proxy appends to it) is no reason
        # to fall back to the client's XFF.
        ("203.0.113.9", 'for="198.51.100.8, for=198.51.100.8', None),
        ("[2001:db8::1]:4711", 'for="[2001:db8::1]"', Forwarded("2001:db8::1")),
    ],
)
def test_both_forwarding_headers_name_the_client_only_when_they_agree(
    xff: str | None, forwarded: str | None, client: Forwarded | None
) -> None:
    xffs = [xff] if xff is not None else []
    forwardeds = [forwarded] if forwarded is not None else []
    assert proxied_client(xffs, forwardeds, TRUSTED) == client


def test_the_right_most_untrusted_forwarded_node_is_the_client() -> None:
    trusted = TrustedProxies.parse("10.0.0.0/8, 192.0.2.7")
    header = 'for=198.51.100.9, For="[2001:DB8::7]:4711";proto=HTTPS, for=10.0.0.5;by=x'
    assert forwarded_client(header, trusted) == Forwarded("2001:db8::7", 4711, "https")
    assert forwarded_client("for=192.0.2.7, for=10.0.0.5", trusted) == Forwarded("192.0.2.7")
    assert forwarded_client('for="198.51.100.1:80"', trusted) == Forwarded("198.51.100.1", 80)


@pytest.mark.parametrize(
    "header",
    [
        "for=unknown",  # the proxy that met the client does not know it
        "for=_hidden, for=10.0.0.5",  # an obfuscated name
        "for=198.51.100.1;for",  # malformed
        "for=198.51.100.1 by=10.0.0.1",  # pairs not separated by ;
        'for="198.51.100.1',  # an open quote
        "proto=https",  # no for=
    ],
)
def test_a_forwarded_client_that_is_not_an_address_leaves_the_peer(header: str) -> None:
    assert forwarded_client(header, TrustedProxies.parse("10.0.0.0/8")) is None


@pytest.mark.parametrize("value", ["*", "proxy.internal", "10.0.0.1/8", "10.0.0.0/33"])
def test_forwarded_allow_ips_takes_only_addresses_and_cidr_ranges(value: str) -> None:
    with pytest.raises(ValueError, match="is not an IP address or a CIDR range"):
        ServerConfig.from_options(forwarded_allow_ips=value)


def test_forwarded_allow_ips_comes_from_the_environment_and_trusts_its_ranges() -> None:
    config = load_config([], {"SENSESTREAM_FORWARDED_ALLOW_IPS": "10.0.0.0/8, ::1"})
    trusted = config.listen.trusted_proxies
    assert trusted.trusts("10.200.0.1") and trusted.trusts("::1")
    assert not trusted.trusts("11.0.0.1") and not trusted.trusts("::2")
    assert not ServerConfig().listen.trusted_proxies  # none by default


def test_x_forwarded_proto_goes_with_the_client_x_forwarded_for_names() -> None:
    # uvicorn's own reading of X-Forwarded-For is off: the scheme is ours to take too.
    assert proxied_client(["198.51.100.1"], [], TRUSTED, "https") == Forwarded(
        "198.51.100.1", 0, "https"
    )
    assert proxied_client(["198.51.100.1"], [], TRUSTED, "gopher") == Forwarded("198.51.100.1")


def test_the_asgi_layer_rewrites_client_and_scheme_only_for_a_trusted_peer() -> None:
    seen: list[dict[str, object]] = []

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        seen.append(scope)

    headers = [(b"x-forwarded-for", b"198.51.100.1"), (b"x-forwarded-proto", b"http, https")]
    layer = ForwardedHeader(app, TRUSTED)
    for peer in (("10.0.0.9", 5000), ("203.0.113.7", 5000)):
        scope = {"type": "websocket", "client": peer, "scheme": "ws", "headers": headers}
        asyncio.run(layer(scope, None, None))
    trusted, untrusted = seen
    assert (trusted["client"], trusted["scheme"]) == (("198.51.100.1", 0), "wss")
    assert (untrusted["client"], untrusted["scheme"]) == (("203.0.113.7", 5000), "ws")


@pytest.mark.parametrize(
    ("writes", "client"),
    [
        # The proxy writes Forwarded: a client's X-Forwarded-For is its own, and ignored.
        ("forwarded", ("198.51.100.20", 0)),
        # The proxy writes X-Forwarded-For: a client's Forwarded is ignored.
        ("x-forwarded-for", ("203.0.113.9", 0)),
        # Both read: they disagree, so neither is believed (the proxy's address).
        ("both", ("10.0.0.9", 5000)),
    ],
)
def test_the_header_the_proxies_write_is_the_only_one_read(
    writes: str, client: tuple[str, int]
) -> None:
    seen: list[dict[str, object]] = []

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        seen.append(scope)

    headers = [(b"x-forwarded-for", b"203.0.113.9"), (b"forwarded", b"for=198.51.100.20")]
    layer = ForwardedHeader(app, TrustedProxies.parse("10.0.0.0/8", writes))
    scope = {"type": "http", "client": ("10.0.0.9", 5000), "scheme": "http", "headers": headers}
    asyncio.run(layer(scope, None, None))
    assert seen[0]["client"] == client


def test_forwarded_headers_takes_only_the_two_names() -> None:
    with pytest.raises(ValueError, match="forwarded_headers must be"):
        load_config(["--forwarded-headers", "x-real-ip"], {})
    config = load_config(["--forwarded-headers", "forwarded"], {})
    assert config.listen.trusted_proxies.writes == ("forwarded",)
