"""The client's address when proxies stand in front: which proxies to believe, and RFC 7239.

`X-Forwarded-For` is read by uvicorn's own `ProxyHeadersMiddleware` (given the same trusted
list); this module adds the standard `Forwarded` header, which uvicorn does not read. Both
take the right-most address that is not itself a trusted proxy: every proxy appends the
address it received the request from, so entries left of the first untrusted one were
written by the client and may be forged.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import HTTPConnection

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: One `key=value` pair of a Forwarded element: a token, or a quoted string (RFC 7230).
#: Unquoted values are read leniently (a bracketed IPv6 address some proxies leave bare).
_PAIR = re.compile(r'\s*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;,"]*)\s*')
_ESCAPE = re.compile(r"\\(.)")


@dataclass(frozen=True, slots=True)
class TrustedProxies:
    """The proxies whose forwarding headers are believed: addresses and CIDR ranges."""

    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> TrustedProxies:
        """From `10.0.0.0/8, 192.0.2.7`; raises ValueError for anything but IPs and CIDRs."""
        networks: list[IPNetwork] = []
        for item in (text or "").split(","):
            if not item.strip():
                continue
            try:
                networks.append(ipaddress.ip_network(item.strip()))
            except ValueError as exc:
                raise ValueError(
                    f"forwarded_allow_ips: {item.strip()!r} is not an IP address or a CIDR "
                    "range (10.0.0.0/8) with no host bits set"
                ) from exc
        return cls(tuple(networks))

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusts(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:  # a unix socket, or a name: never a trusted proxy
            return False
        return any(address in network for network in self.networks)

    def as_strings(self) -> list[str]:
        """The list as uvicorn's `forwarded_allow_ips` takes it."""
        return [str(network) for network in self.networks]


@dataclass(frozen=True, slots=True)
class Forwarded:
    """The client a `Forwarded` header names: its address, port (0: not given), scheme."""

    host: str
    port: int = 0
    proto: str | None = None


def forwarded_elements(value: str) -> list[dict[str, str]] | None:
    """A Forwarded header's elements, each its pairs (keys lower-cased); None if malformed."""
    elements: list[dict[str, str]] = []
    pairs: dict[str, str] = {}
    pos = 0
    while pos < len(value):
        if value[pos] in " \t":
            pos += 1
            continue
        if value[pos] == ",":  # empty elements (several headers joined) are allowed
            elements.append(pairs)
            pairs, pos = {}, pos + 1
            continue
        match = _PAIR.match(value, pos)
        if match is None:
            return None
        raw = match[2]
        pairs[match[1].lower()] = _ESCAPE.sub(r"\1", raw[1:-1]) if raw[:1] == '"' else raw
        pos = match.end()
        if pos < len(value) and value[pos] == ";":
            pos += 1
        elif pos < len(value) and value[pos] != ",":
            return None
    elements.append(pairs)
    return [pairs for pairs in elements if pairs]


def node_address(node: str) -> tuple[str, int] | None:
    """The IP address and port of a `for=` node (`192.0.2.1`, `[2001:db8::1]:80`), or None
    for `unknown`, an obfuscated name or anything malformed."""
    port = ""
    if node.startswith("["):
        host, _, rest = node[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                return None
            port = rest[1:]
    elif node.count(":") == 1:
        host, port = node.split(":")
    else:
        host = node
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return str(address), int(port) if port.isdigit() else 0


def forwarded_client(value: str, trusted: TrustedProxies) -> Forwarded | None:
    """The right-most node of `Forwarded: value` that is not a trusted proxy, or None when
    that node is unknown, obfuscated or malformed (the peer's own address then stands)."""
    elements = forwarded_elements(value)
    if not elements:
        return None
    chosen = elements[0]  # every hop trusted: the left-most is the originating client
    for pairs in reversed(elements):
        node = node_address(pairs.get("for", ""))
        if node is None or not trusted.trusts(node[0]):
            chosen = pairs
            break
    node = node_address(chosen.get("for", ""))
    if node is None:
        return None
    proto = chosen.get("proto", "").lower()
    return Forwarded(node[0], node[1], proto if proto in ("http", "https") else None)


def _headers(scope: dict[str, Any], name: bytes) -> Iterator[str]:
    for key, value in scope.get("headers") or ():
        if key == name:
            yield value.decode("latin-1")


class ForwardedHeader:
    """ASGI layer: the client address from `Forwarded` when a trusted proxy sent it.

    It runs after uvicorn's X-Forwarded-For middleware and leaves any request that carries
    `X-Forwarded-For` to it, so one header decides and the peer it checks is the socket's.
    """

    def __init__(self, app: Any, trusted: TrustedProxies) -> None:
        self.app = app
        self.trusted = trusted

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = self._rewritten(scope)
        await self.app(scope, receive, send)

    def _rewritten(self, scope: dict[str, Any]) -> dict[str, Any]:
        peer = scope.get("client")
        if not peer or next(_headers(scope, b"x-forwarded-for"), None) is not None:
            return scope
        values = list(_headers(scope, b"forwarded"))
        if not values or not self.trusted.trusts(peer[0]):
            return scope
        client = forwarded_client(", ".join(values), self.trusted)
        if client is None:
            return scope
        scope = {**scope, "client": (client.host, client.port)}
        if client.proto is not None:
            websocket = scope["type"] == "websocket"
            scope["scheme"] = client.proto.replace("http", "ws") if websocket else client.proto
        return scope


def client_host(conn: HTTPConnection) -> str:
    """The client's address as limits key it (a trusted proxy's header already applied)."""
    client = conn.client
    return client.host if client else "unknown"
