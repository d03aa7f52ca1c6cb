"""Client secrets: short-lived tokens a backend mints with its API key for a browser.

Sans-I/O: no clock (`now` is passed in), no randomness (the caller names the token id).
A token is `ek_` + base64url(compact JSON payload) + `.` + base64url(HMAC-SHA256(secret,
"ek1." + that payload text)), unpadded. It is stateless: every process given the same
secret accepts it, so a host's workers and several hosts behind one balancer take each
other's tokens. The payload names the tenant the token speaks for (the minting key's, or
the one an admin key named) and the minting key's tenant and scope when they differ, when
the token was made and expires, its id (which the host counts its sessions by), the most
sessions it may open, what it may do besides streaming (its scopes), and the options it
pins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from engine.types import Hotword
from server.http.scopes import DEFAULT_SCOPES
from server.http.sealed import Unsealed, seal, unseal
from server.http.tenants import Tenant
from streaming.errors import InvalidFieldError
from streaming.pins import Pins

PREFIX = b"ek_"
#: What the MAC covers before the payload: a later format signs another label.
LABEL = b"ek1."
#: Tokens travel in URLs and headers; a longer value is refused unread.
MAX_TOKEN_CHARS = 4096
MIN_SECRET_BYTES = 32


class TokenRefusal(StrEnum):
    """Why a presented token is not accepted (the words go to the log and the 401)."""

    MALFORMED = "malformed client secret"
    BAD_SIGNATURE = "client secret has a bad signature"
    EXPIRED = "client secret expired"


@dataclass(frozen=True, slots=True)
class Grant:
    """What a valid token grants: the tenant it speaks for, its life, its id, how many
    sessions it may open, what it pins, what it may do besides streaming (`scopes`, see
    `server.http.scopes`), and the minting key's tenant and scope (`issuer`; None: the
    token's own tenant), whose key must still be on the server for the token to be."""

    tenant: Tenant
    token_id: str
    issued_at: int
    expires_at: int
    max_sessions: int
    pins: Pins = field(default_factory=Pins)
    scopes: frozenset[str] = DEFAULT_SCOPES
    issuer: Tenant | None = None

    @property
    def minted_by(self) -> Tenant:
        """The tenant and scope of the key that minted the token."""
        return self.issuer or self.tenant


def mint_token(secret: bytes, grant: Grant) -> str:
    """The token for `grant`, signed with `secret`."""
    claims: dict[str, Any] = {
        "tenant": grant.tenant.name,
        "admin": grant.tenant.admin,
        "iat": grant.issued_at,
        "exp": grant.expires_at,
        "jti": grant.token_id,
        "max_sessions": grant.max_sessions,
        "scopes": sorted(grant.scopes),
    }
    if grant.minted_by != grant.tenant:
        claims["issuer"] = {"tenant": grant.minted_by.name, "admin": grant.minted_by.admin}
    pins = pins_json(grant.pins)
    if pins:
        claims["pins"] = pins
    return seal(secret, PREFIX, LABEL, claims)


def verify_token(secret: bytes, value: bytes, now: float) -> Grant | TokenRefusal:
    """The grant of a presented token, or why not: the signature is compared first (in
    constant time, as its text, so no other spelling of the same bytes passes), then the
    payload read, then its expiry against `now`."""
    claims = unseal(secret, PREFIX, LABEL, value, MAX_TOKEN_CHARS)
    if claims == Unsealed.BAD_SIGNATURE:
        return TokenRefusal.BAD_SIGNATURE
    if not isinstance(claims, dict):
        return TokenRefusal.MALFORMED
    try:
        grant = _grant(claims)
    except (ValueError, TypeError, KeyError, AttributeError, InvalidFieldError):
        # Signed with our secret yet unreadable: only a minter of another version.
        return TokenRefusal.MALFORMED
    if now >= grant.expires_at:
        return TokenRefusal.EXPIRED
    return grant


def _grant(claims: dict[str, Any]) -> Grant:
    """A payload's claims as a grant; raises ValueError, TypeError or KeyError.

    A payload without `scopes` (minted before scopes existed) streams and does nothing else.
    """
    ints = [claims[name] for name in ("iat", "exp", "max_sessions")]
    if any(type(v) is not int for v in ints) or not isinstance(claims["jti"], str):
        raise TypeError("a claim has the wrong type")
    scopes = claims.get("scopes", [])
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
        raise TypeError("scopes must be a list of names")
    issuer = claims.get("issuer")
    issued, expires, count = ints
    return Grant(
        _tenant(claims),
        claims["jti"],
        issued,
        expires,
        count,
        pins_from_json(claims.get("pins", {})),
        DEFAULT_SCOPES | frozenset(scopes),
        None if issuer is None else _tenant(issuer),
    )


def _tenant(claims: dict[str, Any]) -> Tenant:
    """A tenant and scope as a payload names one; raises TypeError or KeyError."""
    if not isinstance(claims["tenant"], str) or type(claims["admin"]) is not bool:
        raise TypeError("a claim has the wrong type")
    return Tenant(claims["tenant"], claims["admin"])


def pins_json(pins: Pins) -> dict[str, Any]:
    """The pins as the payload holds them: only what is pinned."""
    out: dict[str, Any] = {}
    if pins.language is not None:
        out["language"] = pins.language
    if pins.hotwords is not None:
        out["hotwords"] = [[h.phrase, h.boost] for h in pins.hotwords]
    if pins.encoding is not None:
        out["encoding"] = pins.encoding
    if pins.sample_rate is not None:
        out["sample_rate"] = pins.sample_rate
    return out


def pins_from_json(given: dict[str, Any]) -> Pins:
    """Pins read back from a payload; raises ValueError, TypeError, AttributeError or
    InvalidFieldError."""
    hotwords = given.get("hotwords")
    return Pins(
        language=given.get("language"),
        hotwords=None if hotwords is None else tuple(Hotword(p, float(b)) for p, b in hotwords),
        encoding=given.get("encoding"),
        sample_rate=given.get("sample_rate"),
    )
