"""Signed, stateless tokens: a prefix, base64url(compact JSON claims), `.`, and
base64url(HMAC-SHA256(secret, label + that payload text)), all unpadded.

Every process given the same secret accepts the others' tokens. The label keeps one kind
of token from passing for another (a client secret is not a resume token), and names the
format's version.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from typing import Any

BASE64URL = re.compile(rb"[A-Za-z0-9_-]+")


def b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def unb64(text: bytes) -> bytes:
    """Unpadded base64url; raises ValueError (binascii.Error is one) for anything else."""
    if not BASE64URL.fullmatch(text):
        raise ValueError("not unpadded base64url")
    return base64.urlsafe_b64decode(text + b"=" * (-len(text) % 4))


def mac(secret: bytes, label: bytes, payload: bytes) -> bytes:
    return b64(hmac.new(secret, label + payload, hashlib.sha256).digest())


def seal(secret: bytes, prefix: bytes, label: bytes, claims: dict[str, Any]) -> str:
    """The token holding `claims`, signed with `secret`."""
    payload = b64(json.dumps(claims, separators=(",", ":"), ensure_ascii=True).encode())
    return (prefix + payload + b"." + mac(secret, label, payload)).decode("ascii")


class Unsealed:
    """Why a presented token's claims cannot be read: its shape, or its signature."""

    MALFORMED = "malformed"
    BAD_SIGNATURE = "bad signature"


def unseal(
    secret: bytes, prefix: bytes, label: bytes, value: bytes, max_chars: int
) -> dict[str, Any] | str:
    """The claims of a presented token, or `Unsealed.MALFORMED` / `BAD_SIGNATURE`: the
    signature is compared first (in constant time, as its text, so no other spelling of
    the same bytes passes), then the payload read."""
    if not value.startswith(prefix) or len(value) > max_chars:
        return Unsealed.MALFORMED
    payload, dot, signature = value[len(prefix) :].partition(b".")
    if not dot or not payload:
        return Unsealed.MALFORMED
    if not hmac.compare_digest(signature, mac(secret, label, payload)):
        return Unsealed.BAD_SIGNATURE
    try:
        claims = json.loads(unb64(payload))
    except (ValueError, binascii.Error):
        return Unsealed.MALFORMED  # signed with our secret yet unreadable: another version
    return claims if isinstance(claims, dict) else Unsealed.MALFORMED
