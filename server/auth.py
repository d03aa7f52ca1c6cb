"""API keys (Bearer header or ?token=) compared in constant time, and the Origin allowlist."""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from pathlib import Path

from starlette.requests import HTTPConnection


def load_keys(inline: str | None, key_file: str | None) -> tuple[bytes, ...]:
    """Keys from a comma-separated option and/or a file with one key per line (# comments)."""
    keys = [k.strip() for k in (inline or "").split(",") if k.strip()]
    if key_file:
        for line in Path(key_file).read_text(encoding="utf-8").splitlines():
            key = line.split("#", 1)[0].strip()
            if key:
                keys.append(key)
    if any(len(k) < 16 for k in keys):
        raise ValueError("API keys must be at least 16 characters")
    if (inline or key_file) and not keys:
        # Keys were asked for; none came out: serving openly would be a silent downgrade.
        raise ValueError(f"no API key in {key_file or 'api_keys'}")
    return tuple(k.encode() for k in keys)


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


def key_matches(token: bytes | None, keys: Iterable[bytes]) -> bool:
    """Compare against every key without stopping early, so timing reveals nothing."""
    if token is None:
        return False
    found = False
    for key in keys:
        found |= hmac.compare_digest(token, key)
    return found


def origin_allowed(request: HTTPConnection, allowed: tuple[str, ...]) -> bool:
    """No allowlist means any origin; otherwise a browser's Origin header must be listed.

    Non-browser clients send no Origin; they are held to the API key instead.
    """
    origin = request.headers.get("Origin")
    return not allowed or origin is None or origin in allowed
