"""The client's address when proxies stand in front: which proxies to believe, and RFC 7239.

A request from a trusted proxy names its client in `X-Forwarded-For`, RFC 7239 `Forwarded`
or both. Each is walked from the right to the first address that is not itself a trusted
proxy: every proxy appends the address it received the request from, so entries left of
the first untrusted one were written by the client and may be forged. A proxy passes on
the header it does not write as the client sent it, and nothing in the request says
which one the trusted hop wrote: when both name an untrusted client and the two differ,
neither is believed and the proxy's own address stands.
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
XFF, FORWARDED = "x-forwarded-for", "forwarded"
FORWARDING_HEADERS = (XFF, FORWARDED)
#: The schemes a Forwarded `proto=` (or X-Forwarded-Proto) may set.
_PROTOS = ("http", "https")
PROTO = b"x-forwarded-proto"


@dataclass(frozen=True, slots=True)
class TrustedProxies:
    """The proxies whose forwarding headers are believed: addresses and CIDR ranges."""

    networks: tuple[IPNetwork, ...] = ()
    # The forwarding headers they write: the other one, if a request carries it, is the
    # client's own and never read. Both: each is read, and two that disagree name no one.
    writes: tuple[str, ...] = FORWARDING_HEADERS

    @classmethod
    def parse(cls, text: str | None, headers: str = "both") -> TrustedProxies:
        """From `10.0.0.0/8, 192.0.2.7` and which headers they write (`x-forwarded-for`,
        `forwarded` or `both`); raises ValueError for anything but IPs and CIDRs, or
        another header name."""
        writes = FORWARDING_HEADERS if headers == "both" else (headers,)
        if not set(writes) <= set(FORWARDING_HEADERS):
            raise ValueError(
                f"forwarded_headers must be x-forwarded-for, forwarded or both; got {headers!r}"
            )
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
        return cls(tuple(networks), writes)

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


@dataclass(frozen=True, slots=True)
class _Hop:
    """One entry of a forwarding header: its address (None: not one) and proto."""

    address: tuple[str, int] | None
    proto: str | None = None

    def client(self) -> Forwarded | None:
        if self.address is None:
            return None
        return Forwarded(self.address[0], self.address[1], self.proto)


def _forwarded_hops(value: str) -> list[_Hop] | None:
    """A Forwarded header's hops, left to right; None if malformed."""
    elements = forwarded_elements(value)
    if elements is None:
        return None
    hops = []
    for pairs in elements:
        proto = pairs.get("proto", "").lower()
        hops.append(_Hop(node_address(pairs.get("for", "")), proto if proto in _PROTOS else None))
    return hops


def _xff_hops(value: str, proto: str | None) -> list[_Hop]:
    """X-Forwarded-For's hops; X-Forwarded-Proto (one scheme, the nearest proxy's)
    goes with the client it names, the right-most."""
    hops = [_Hop(node_address(entry.strip())) for entry in value.split(",")]
    if hops and proto in _PROTOS:
        hops[-1] = _Hop(hops[-1].address, proto)
    return hops


def _walk(hops: list[_Hop], trusted: TrustedProxies) -> _Hop | None:
    """The right-most hop that is not a trusted proxy; None when every hop is one."""
    for hop in reversed(hops):
        if hop.address is None or not trusted.trusts(hop.address[0]):
            return hop
    return None


def _host(hop: _Hop) -> str | None:
    return hop.address[0] if hop.address is not None else None


def proxied_client(
    xff: list[str], forwarded: list[str], trusted: TrustedProxies, xff_proto: str | None = None
) -> Forwarded | None:
    """The client that a trusted peer's `X-Forwarded-For` and `Forwarded` values name, or
    None for the peer's own address: a malformed Forwarded, a client that is `unknown`, an
    obfuscated name, or two headers that name different untrusted clients.

    Both headers make one chain, Forwarded's hops nearest: a header whose hops are all
    trusted hands the walk on to the other (one proxy writes XFF, the next Forwarded).
    """
    x_hops = _xff_hops(", ".join(xff), xff_proto) if xff else []
    f_hops = _forwarded_hops(", ".join(forwarded)) if forwarded else []
    if f_hops is None:  # a client can break the header a proxy then appends to
        return None
    x_client, f_client = _walk(x_hops, trusted), _walk(f_hops, trusted)
    if x_client is not None and f_client is not None and _host(x_client) != _host(f_client):
        return None  # one of them is the client's own, and nothing says which
    chain = [*x_hops, *f_hops]
    if not chain:
        return None
    chosen = _walk(chain, trusted) or chain[0]  # all trusted: the left-most originated it
    return chosen.client()


def forwarded_client(value: str, trusted: TrustedProxies) -> Forwarded | None:
    """The right-most node of `Forwarded: value` that is not a trusted proxy, or None when
    that node is unknown, obfuscated or malformed (the peer's own address then stands)."""
    return proxied_client([], [value], trusted)


def _headers(scope: dict[str, Any], name: bytes) -> Iterator[str]:
    for key, value in scope.get("headers") or ():
        if key == name:
            yield value.decode("latin-1")


class ForwardedHeader:
    """ASGI layer: the client address from the forwarding headers a trusted proxy sent.

    It decides from the socket's peer (`scope["client"]`: uvicorn's own X-Forwarded-For
    handling is off, see `listener.asgi_server`), so a client-written header never decides
    alone.
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
        if not peer or not self.trusted.trusts(str(peer[0])):
            return scope
        writes = self.trusted.writes
        xff = list(_headers(scope, b"x-forwarded-for")) if XFF in writes else []
        forwarded = list(_headers(scope, b"forwarded")) if FORWARDED in writes else []
        if not xff and not forwarded:
            return scope
        client = proxied_client(xff, forwarded, self.trusted, _last(_headers(scope, PROTO)))
        if client is None:
            return scope
        scope = {**scope, "client": (client.host, client.port)}
        if client.proto is not None:
            websocket = scope["type"] == "websocket"
            scope["scheme"] = client.proto.replace("http", "ws") if websocket else client.proto
        return scope


def _last(values: Iterator[str]) -> str | None:
    """The right-most entry of a comma-separated header: what the nearest proxy wrote."""
    entries = [e.strip().lower() for v in values for e in v.split(",") if e.strip()]
    return entries[-1] if entries else None


def client_host(conn: HTTPConnection) -> str:
    """The client's address as limits key it (a trusted proxy's header already applied)."""
    client = conn.client
    return client.host if client else "unknown"
