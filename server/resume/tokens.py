"""Resume tokens: what a v1 stream's `ready` hands its client, to take the stream up again
on a new connection after the old one dropped.

Sans-I/O (the caller passes `now`). A token is `rs_` + base64url(compact JSON claims) + `.`
+ base64url(HMAC-SHA256(secret, "rs1." + that payload)), unpadded (`server.http.sealed`),
signed with the host's token secret, so any worker of the host can check it. It names the
tenant whose key opened the stream, the stream's id and its session, when it was made and
when it expires. It proves only that this server gave it for that stream: whether the
stream can still be resumed (its grace after the drop) is the server's to know.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeGuard

from server.http.sealed import Unsealed, seal, unseal

PREFIX = b"rs_"
#: What the MAC covers before the payload: not a client secret's label, so neither kind
#: of token passes for the other.
LABEL = b"rs1."
MAX_TOKEN_CHARS = 1024


class ResumeRefusal(StrEnum):
    """Why a presented resume token is refused (the words go into the error message)."""

    MALFORMED = "the resume token is malformed"
    FORGED = "the resume token is not one this server signed"
    EXPIRED = "the resume token has expired"
    OTHER_TENANT = "the resume token belongs to another tenant's stream"


@dataclass(frozen=True, slots=True)
class ResumeClaim:
    """The stream a token was given for: its tenant, stream id and session."""

    tenant: str
    stream_id: str
    session_id: str
    issued_at: int
    expires_at: int


def issue(secret: bytes, claim: ResumeClaim) -> str:
    """The token for `claim`, signed with `secret`."""
    claims: dict[str, Any] = {
        "tenant": claim.tenant,
        "stream": claim.stream_id,
        "session": claim.session_id,
        "iat": claim.issued_at,
        "exp": claim.expires_at,
    }
    return seal(secret, PREFIX, LABEL, claims)


def verify(secret: bytes, token: str, tenant: str, now: float) -> ResumeClaim | ResumeRefusal:
    """The claim of a token presented by `tenant`'s connection, or why it is refused: the
    signature first, then the claims, then its expiry against `now`, then its tenant."""
    claims = unseal(secret, PREFIX, LABEL, token.encode("utf-8", "replace"), MAX_TOKEN_CHARS)
    if claims == Unsealed.BAD_SIGNATURE:
        return ResumeRefusal.FORGED
    if not isinstance(claims, dict):
        return ResumeRefusal.MALFORMED
    claim = _claim(claims)
    if claim is None:
        return ResumeRefusal.MALFORMED
    if now >= claim.expires_at:
        return ResumeRefusal.EXPIRED
    if claim.tenant != tenant:
        return ResumeRefusal.OTHER_TENANT
    return claim


def _claim(claims: dict[str, Any]) -> ResumeClaim | None:
    tenant, stream, session = claims.get("tenant"), claims.get("stream"), claims.get("session")
    issued, expires = claims.get("iat"), claims.get("exp")
    if not (isinstance(tenant, str) and isinstance(stream, str) and isinstance(session, str)):
        return None
    if not _whole(issued) or not _whole(expires):
        return None
    return ResumeClaim(tenant, stream, session, issued, expires)


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
