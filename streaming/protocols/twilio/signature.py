"""X-Twilio-Signature: how Twilio proves a request is its own, checked on the handshake.

Twilio signs every request it makes with the account's auth token: the base64 HMAC-SHA1
of the full URL it requested, followed, for a form POST, by each parameter's name and
value in name order. A Media Streams handshake is a GET of the `wss://` URL from the
TwiML, so the URL alone is signed. As Twilio's own validators do, the URL is also tried
with its port removed, and with the scheme's default port added: proxies and Twilio
disagree on whether `:443` is written.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from streaming.errors import UnauthorizedError
from streaming.protocols.base import Handshake

SIGNATURE_HEADER = "x-twilio-signature"
DEFAULT_PORTS: Mapping[str, int] = {"https": 443, "wss": 443, "http": 80, "ws": 80}


def twilio_signature(token: str, url: str, params: Mapping[str, str] | None = None) -> str:
    """The signature Twilio sends for a request to `url` (with `params` for a form POST)."""
    fields = params or {}
    signed = url + "".join(name + fields[name] for name in sorted(fields))
    digest = hmac.new(token.encode(), signed.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def url_variants(url: str) -> tuple[str, ...]:
    """`url` without its port and with one (its own, or the scheme's default)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # a port that is not a number: no variants, only the URL itself
        return (url,)
    host = parts.netloc
    if port is not None:
        host = host[: host.rfind(":")]
    else:
        port = DEFAULT_PORTS.get(parts.scheme)
    without = urlunsplit(parts._replace(netloc=host))
    variants = [without]
    if port is not None:
        variants.append(urlunsplit(parts._replace(netloc=f"{host}:{port}")))
    return tuple(dict.fromkeys([url, *variants]))


def signature_valid(
    token: str, url: str, signature: str, params: Mapping[str, str] | None = None
) -> bool:
    """Whether `signature` is Twilio's for `url` under `token` (compared in constant time)."""
    given = signature.encode()
    return any(
        hmac.compare_digest(twilio_signature(token, candidate, params).encode(), given)
        for candidate in url_variants(url)
    )


def check_handshake(handshake: Handshake, token: str) -> None:
    """Refuse a handshake that Twilio did not sign with `token` (UnauthorizedError)."""
    signature = handshake.headers.get(SIGNATURE_HEADER)
    if not signature:
        raise UnauthorizedError("missing X-Twilio-Signature: only Twilio may open this stream")
    if not signature_valid(token, handshake.url, signature):
        raise UnauthorizedError(
            "X-Twilio-Signature does not match this URL and the configured Twilio auth token"
        )
