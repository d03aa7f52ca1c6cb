"""Client secrets' scopes and issuers, without a server: what the token carries, when it is
still taken, and the gate the listing, following and upload routes ask.

The routes themselves, on a real server, are tests/server/test_client_secrets.py's.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

from starlette.responses import Response

from server.http.access import permits, scoped
from server.http.client_secrets import Grant, TokenRefusal, mint_token, verify_token
from server.http.credentials import UNKNOWN_TENANT, Credentials, Refused
from server.http.scopes import FILES_WRITE, STREAM, STREAMS_READ
from server.http.tenants import Keyring, Tenant, parse_key

SECRET = b"s" * 32
NOW = 1_700_000_000
OPS_ADMIN = Tenant("ops", admin=True)
BETA = Tenant("beta")
READ = frozenset({STREAM, STREAMS_READ})


def grant(
    tenant: Tenant = BETA, scopes: frozenset[str] = READ, issuer: Tenant | None = OPS_ADMIN
) -> Grant:
    return Grant(tenant, "tok1", NOW, NOW + 60, 3, scopes=scopes, issuer=issuer)


def token(g: Grant) -> bytes:
    return mint_token(SECRET, g).encode()


def signed(claims: object) -> bytes:
    """A token of any payload, signed as the format says (`ek1.` + the payload's text)."""
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=")
    mac = hmac.new(SECRET, b"ek1." + payload, hashlib.sha256).digest()
    return b"ek_" + payload + b"." + base64.urlsafe_b64encode(mac).rstrip(b"=")


def test_a_token_carries_its_scopes_and_the_key_that_minted_it() -> None:
    minted = grant()
    assert verify_token(SECRET, token(minted), NOW) == minted
    claims = {"tenant": "beta", "admin": False, "iat": NOW, "exp": NOW + 60, "jti": "tok1"}
    issuer = {"tenant": "ops", "admin": True}
    written = {**claims, "max_sessions": 3, "scopes": ["streams:read"], "issuer": issuer}
    assert verify_token(SECRET, signed(written), NOW) == minted  # `stream` always granted
    own = grant(issuer=None)  # minted by its own tenant's key: no issuer in the payload
    assert verify_token(SECRET, token(own), NOW) == own and own.minted_by == BETA


def test_a_payload_without_scopes_only_streams() -> None:
    claims = {"tenant": "beta", "admin": False, "iat": NOW, "exp": NOW + 60, "jti": "t"}
    old = verify_token(SECRET, signed({**claims, "max_sessions": 1}), NOW)
    assert isinstance(old, Grant) and old.scopes == {STREAM}
    assert not permits(old, STREAMS_READ) and not permits(old, FILES_WRITE)


def test_a_signed_payload_with_bad_scopes_or_issuer_is_malformed() -> None:
    claims = {"tenant": "beta", "admin": False, "iat": 1, "exp": NOW + 9, "jti": "t"}
    base = {**claims, "max_sessions": 1}
    for bad in (
        {**base, "scopes": "streams:read"},
        {**base, "scopes": [5]},
        {**base, "issuer": "ops"},
        {**base, "issuer": {"tenant": "ops"}},
    ):
        assert verify_token(SECRET, signed(bad), NOW) is TokenRefusal.MALFORMED


def keyring(*entries: str) -> Keyring:
    return Keyring(tuple(parse_key(entry) for entry in entries))


def test_a_token_an_admin_key_minted_for_a_tenant_lives_while_both_keep_keys() -> None:
    beta, ops = "beta:beta-key-0123456789", "ops:ops-key-0123456789:admin"
    value = token(grant())
    assert Credentials(keyring(beta, ops), SECRET).identify(value, NOW) == grant()
    # The admin key gone (ops keeps a plain key), or the named tenant's keys gone.
    plain_ops = "ops:ops-other-key-0123456789"
    assert Credentials(keyring(beta, plain_ops), SECRET).identify(value, NOW) is UNKNOWN_TENANT
    assert Credentials(keyring(ops), SECRET).identify(value, NOW) is UNKNOWN_TENANT
    # An admin's token of its own tenant is not an admin's, and goes with the admin key.
    own = token(grant(Tenant("ops"), issuer=OPS_ADMIN))
    assert Credentials(keyring(ops), SECRET).identify(own, NOW) == grant(Tenant("ops"))
    assert Credentials(keyring(plain_ops), SECRET).identify(own, NOW) is UNKNOWN_TENANT


def test_the_gate_passes_keys_whole_and_secrets_only_with_the_scope() -> None:
    assert scoped(OPS_ADMIN, STREAMS_READ) == OPS_ADMIN  # a key keeps its admin reach
    assert scoped(grant(), STREAMS_READ) == BETA
    refused = scoped(grant(scopes=frozenset({STREAM})), STREAMS_READ)
    assert isinstance(refused, Response) and refused.status_code == 403
    assert bytes(refused.body).startswith(b"insufficient_scope: ")
    challenge = refused.headers["WWW-Authenticate"]
    assert challenge == 'Bearer error="insufficient_scope", scope="streams:read"'
    unknown = scoped(Refused("client secret expired"), STREAMS_READ)
    assert isinstance(unknown, Response) and unknown.status_code == 401
    assert permits(grant(scopes=frozenset({STREAM, FILES_WRITE})), FILES_WRITE)
    assert not permits(grant(), FILES_WRITE)
