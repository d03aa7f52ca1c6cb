"""Genesys' signature on an AudioHook handshake (HTTP Message Signatures, RFC 9421).

When an AudioHook integration has a client secret, Genesys signs each WebSocket upgrade
with HMAC-SHA256 under that secret: `keyid` is the integration's API key, the signature
covers the request target, the authority, the `Audiohook-*` headers and `X-API-KEY`, and
it carries `created`, `expires` and a `nonce`. With `--audiohook-client-secret` set, the
server checks all of that before the upgrade and refuses anything else with 401 and the
reason; the API key itself is checked as on every route. The RFC's parsing, signature
base and constant-time comparison are the `http-message-signatures` library's; this
module says what AudioHook requires of a signature.
"""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from http_message_signatures import HTTPMessageVerifier, HTTPSignatureKeyResolver
from http_message_signatures.algorithms import HMAC_SHA256
from http_message_signatures.exceptions import HTTPMessageSignaturesException

from streaming.errors import CLOSE_POLICY_VIOLATION, ProtocolError
from streaming.protocols.base import Handshake

#: What every AudioHook signature must cover (Genesys signs exactly these).
COVERED: Final = (
    "@request-target",
    "@authority",
    "audiohook-organization-id",
    "audiohook-session-id",
    "audiohook-correlation-id",
    "x-api-key",
)
#: The oldest signature taken, from its `created`: Genesys' expire after 30 s; this also
#: bounds one that names no `expires`.
MAX_AGE: Final = datetime.timedelta(minutes=5)


class SignatureError(ProtocolError):
    """A handshake whose signature is missing, malformed, stale or wrong: HTTP 401."""

    code = "bad_signature"
    close_code = CLOSE_POLICY_VIOLATION


@dataclass(frozen=True, slots=True)
class SignedRequest:
    """The parts of an HTTP request a signature may cover, as the library reads them."""

    method: str
    url: str  # http(s)://authority/path?query: the library derives @authority from it
    headers: Mapping[str, str]
    request_target: str  # the path and query as the client sent them


class _OneSecret(HTTPSignatureKeyResolver):
    """Resolves the one client secret, for the key named in the request's own header."""

    def __init__(self, secret: bytes, api_key: str | None) -> None:
        self._secret = secret
        self._api_key = api_key

    def resolve_public_key(self, key_id: str) -> bytes:
        if self._api_key is None or key_id != self._api_key:
            raise SignatureError("the signature's keyid is not the request's X-API-KEY")
        return self._secret


def decode_secret(text: str) -> bytes:
    """A client secret as Genesys shows it (base64) → its bytes."""
    try:
        secret = base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError("the AudioHook client secret must be base64, as Genesys shows it") from exc
    if not secret:
        raise ValueError("the AudioHook client secret is empty")
    return secret


def verify(
    request: SignedRequest,
    secret: bytes,
    key_id: str | None,
    covered: Sequence[str] = COVERED,
    max_age: datetime.timedelta | None = MAX_AGE,
) -> None:
    """Raise SignatureError unless `request` carries a valid HMAC-SHA256 signature under
    `secret` with `keyid` equal to `key_id` that covers every component in `covered`."""
    headers = {name.lower() for name in request.headers}
    if "signature" not in headers and "signature-input" not in headers:
        raise SignatureError("the handshake is not signed (no Signature, Signature-Input)")
    verifier = HTTPMessageVerifier(
        signature_algorithm=HMAC_SHA256, key_resolver=_OneSecret(secret, key_id)
    )
    try:
        verifier.verify(request, max_age=max_age, require_components=covered)
    except HTTPMessageSignaturesException as exc:  # InvalidSignature, and the resolver's
        raise SignatureError(f"bad signature: {_reason(exc)}") from exc


def check_handshake(handshake: Handshake, secret: bytes) -> None:
    """Raise SignatureError unless Genesys signed this AudioHook handshake."""
    verify(signed_request(handshake), secret, handshake.headers.get("x-api-key"))


def signed_request(handshake: Handshake) -> SignedRequest:
    """The handshake as the signed GET; `handshake.url` names the public scheme and host."""
    parts = urlsplit(handshake.url)
    scheme = "https" if parts.scheme in ("wss", "https") else "http"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    url = f"{scheme}://{parts.netloc}{target}"
    return SignedRequest("GET", url, dict(handshake.headers), target)


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__
