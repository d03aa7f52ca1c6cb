"""API keys (Bearer header or ?token=) and their tenants, and the browser Origin policy."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

from server.http.client_secrets import MIN_SECRET_BYTES
from server.http.tenants import Keyring, parse_key


def load_keys(inline: str | None, key_file: str | None) -> Keyring:
    """Keys from a comma-separated option and/or a file with one entry per line (# comments).

    Each entry is `key`, `name:key` or `name:key:admin` (server.http.tenants.parse_key).
    """
    entries = [k.strip() for k in (inline or "").split(",") if k.strip()]
    if key_file:
        for line in Path(key_file).read_text(encoding="utf-8").splitlines():
            entry = line.split("#", 1)[0].strip()
            if entry:
                entries.append(entry)
    if (inline or key_file) and not entries:
        # Keys were asked for; none came out: serving openly would be a silent downgrade.
        raise ValueError(f"no API key in {key_file or 'api_keys'}")
    return Keyring(tuple(parse_key(entry) for entry in entries))


def load_token_secret(inline: str | None, secret_file: str | None) -> bytes | None:
    """The secret client secrets are signed with: the option's, else its file's (without
    surrounding whitespace); None when neither is given. Raises ValueError (too short)
    or OSError (an unreadable file)."""
    if secret_file:
        secret = Path(secret_file).read_bytes().strip()
    elif inline:
        secret = inline.encode()
    else:
        return None
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"the token secret must be at least {MIN_SECRET_BYTES} bytes")
    return secret


#: OpenAI's browser clients carry the key as a WebSocket subprotocol with this prefix.
KEY_SUBPROTOCOL = "openai-insecure-api-key."


def presented_token(request: HTTPConnection) -> bytes | None:
    """The key a client presented: `Authorization: Bearer …`, else `X-API-KEY` (Genesys
    AudioHook's header), else `?token=` (browsers), else OpenAI's browser subprotocol
    `openai-insecure-api-key.<key>`."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip().encode()
    api_key = request.headers.get("X-API-KEY", "").strip()
    if api_key:
        return api_key.encode()
    token = request.query_params.get("token")
    if token:
        return token.encode()
    offered = request.headers.get("Sec-WebSocket-Protocol", "")
    for name in (part.strip() for part in offered.split(",")):
        if name.startswith(KEY_SUBPROTOCOL) and len(name) > len(KEY_SUBPROTOCOL):
            return name[len(KEY_SUBPROTOCOL) :].encode()
    return None


#: In `--allowed-origins`: the server's own page (allowed anyway; accepted so that lists
#: naming it work), and any origin at all.
SELF, ANY = "self", "*"
DEFAULT_PORTS = {"http": 80, "https": 443}
#: What the request's own scheme is as a page's origin names it.
PAGE_SCHEMES = {"http": "http", "https": "https", "ws": "http", "wss": "https"}


def normal_origin(text: str) -> str | None:
    """`scheme://host[:port]` as browsers write an Origin (lower case, no default port),
    or None for anything else (`null`, a path, another scheme)."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:  # a port that is no number, or a bad IPv6 literal
        return None
    host = parts.hostname
    if parts.scheme not in DEFAULT_PORTS or not host or parts.path not in ("", "/"):
        return None
    if parts.query or parts.fragment or "@" in parts.netloc:
        return None
    shown = f"[{host}]" if ":" in host else host
    suffix = "" if port is None or port == DEFAULT_PORTS[parts.scheme] else f":{port}"
    return f"{parts.scheme}://{shown}{suffix}"


def _unspoofable(origin: str) -> bool:
    """A page origin DNS rebinding cannot fake: an IP literal, or `localhost` (which
    browsers resolve to loopback themselves)."""
    host = urlsplit(origin).hostname or ""
    if host == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class OriginPolicy:
    """Which browser Origins may use the API; clients that send none are not asked.

    The server's own page is always allowed (its origin is `public_origin`, or the
    request's own scheme and Host); a list adds origins to it. `pinned`: the Host only
    counts when DNS rebinding cannot fake it (a loopback listener, or one whose public URL
    is known).
    """

    listed: frozenset[str] = frozenset()
    any_origin: bool = False
    public_origin: str | None = None
    pinned: bool = True

    @classmethod
    def from_settings(
        cls, allowed: tuple[str, ...], public_url: str | None, listen_host: str
    ) -> OriginPolicy:
        """The own page and what `--allowed-origins` lists; raises ValueError."""
        listed = set()
        for entry in allowed:
            if entry in (SELF, ANY):
                continue
            origin = normal_origin(entry)
            if origin is None:
                raise ValueError(
                    f"allowed_origins entry {entry!r} is not self, * or scheme://host[:port]"
                )
            listed.add(origin)
        parts = urlsplit(public_url or "")
        public = normal_origin(f"{parts.scheme}://{parts.netloc}") if public_url else None
        return cls(
            frozenset(listed),
            any_origin=ANY in allowed,
            public_origin=public,
            pinned=_loopback(listen_host) or public is not None,
        )

    def allows(self, origin: str | None, scheme: str, host: str | None) -> bool:
        """Whether a request with this Origin, on this scheme and Host, may go on."""
        if origin is None or self.any_origin:
            return True
        page = normal_origin(origin)
        if page is None:
            return False
        if page in self.listed or page == self.public_origin:
            return True
        own = normal_origin(f"{PAGE_SCHEMES.get(scheme, scheme)}://{host}") if host else None
        return page == own and (not self.pinned or _unspoofable(page))


def origin_allowed(request: HTTPConnection, policy: OriginPolicy) -> bool:
    """The policy applied to a request's Origin, scheme and Host headers."""
    return policy.allows(
        request.headers.get("Origin"), request.url.scheme, request.headers.get("Host")
    )
