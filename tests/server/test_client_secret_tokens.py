"""Client secrets as tokens, without a server: minted, verified, refused for each reason.

The token module is sans-I/O (`now` passed in), so expiry is tested by passing a later
`now`; `Credentials` puts keys and tokens together as every route asks them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path

import pytest

from engine.types import Hotword
from server.config import ListenConfig
from server.http.auth import load_token_secret
from server.http.client_secrets import (
    MAX_TOKEN_CHARS,
    Grant,
    TokenRefusal,
    mint_token,
    verify_token,
)
from server.http.credentials import NO_KEY, UNKNOWN_TENANT, Credentials, Refused
from server.http.tenants import ANONYMOUS, Keyring, Tenant, parse_key
from server.supervisor.host import worker_environ
from streaming.pins import Pins

SECRET = b"s" * 32
NOW = 1_700_000_000
ACME = Tenant("acme")
PINS = Pins("en", (Hotword("hello world", 2.0),), "mulaw", 8000)


def grant(tenant: Tenant = ACME, expires_in: int = 600, pins: Pins = PINS) -> Grant:
    return Grant(tenant, "tok1", NOW, NOW + expires_in, 3, pins)


def token(g: Grant | None = None, secret: bytes = SECRET) -> bytes:
    return mint_token(secret, g or grant()).encode()


def test_a_token_verifies_to_the_grant_it_was_minted_for() -> None:
    value = token()
    assert value.startswith(b"ek_") and b"=" not in value
    assert verify_token(SECRET, value, NOW + 599.9) == grant()
    bare = grant(Tenant("ops", admin=True), pins=Pins())
    assert verify_token(SECRET, token(bare), NOW) == bare


def test_changing_any_character_of_the_payload_or_signature_breaks_the_signature() -> None:
    value = token()
    start = len(b"ek_")
    for i in range(start, len(value)):
        if value[i : i + 1] == b".":
            continue
        for replacement in (b"A", b"_", b"z"):
            if value[i : i + 1] == replacement:
                continue
            tampered = value[:i] + replacement + value[i + 1 :]
            assert verify_token(SECRET, tampered, NOW) is TokenRefusal.BAD_SIGNATURE, i


def test_a_payload_that_says_more_with_the_old_signature_is_refused() -> None:
    payload, _, signature = token()[3:].partition(b".")
    claims = json.loads(base64.urlsafe_b64decode(payload + b"=" * (-len(payload) % 4)))
    claims["admin"] = True
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=")
    assert verify_token(SECRET, b"ek_" + forged + b"." + signature, NOW) is (
        TokenRefusal.BAD_SIGNATURE
    )


def test_a_token_expires_at_its_expiry() -> None:
    value = token()
    assert isinstance(verify_token(SECRET, value, NOW + 599), Grant)
    assert verify_token(SECRET, value, NOW + 600) is TokenRefusal.EXPIRED


def test_another_secret_does_not_verify_a_token() -> None:
    assert verify_token(b"t" * 32, token(), NOW) is TokenRefusal.BAD_SIGNATURE


@pytest.mark.parametrize(
    "value",
    [b"", b"ek_", b"ek_abc", b"ek_.abc", b"sk_abc.def", b"ek_" + b"a" * MAX_TOKEN_CHARS + b".x"],
)
def test_malformed_values_are_refused_as_such(value: bytes) -> None:
    assert verify_token(SECRET, value, NOW) is TokenRefusal.MALFORMED


def signed(claims: object) -> bytes:
    """A token of any payload, signed as the format says (`ek1.` + the payload's text)."""
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=")
    mac = hmac.new(SECRET, b"ek1." + payload, hashlib.sha256).digest()
    return b"ek_" + payload + b"." + base64.urlsafe_b64encode(mac).rstrip(b"=")


def test_the_format_is_as_documented() -> None:
    claims = {"tenant": "acme", "admin": False, "iat": NOW, "exp": NOW + 9, "jti": "t"}
    assert verify_token(SECRET, signed({**claims, "max_sessions": 2}), NOW) == Grant(
        ACME, "t", NOW, NOW + 9, 2
    )


def test_a_signed_payload_that_is_not_a_grant_is_malformed() -> None:
    # Only a minter with our secret could make one: another version's, say.
    claims = {"tenant": "acme", "admin": False, "iat": 1, "exp": NOW + 9, "jti": "t"}
    bad = [
        {"tenant": "acme"},
        {**claims, "tenant": 5},
        [],
        {**claims, "max_sessions": 1, "pins": 5},
        {**claims, "max_sessions": 1, "pins": {"hotwords": [[5, 1.0]]}},
        {**claims, "max_sessions": 1, "pins": {"language": "xx"}},
    ]
    for claims in bad:
        assert verify_token(SECRET, signed(claims), NOW) is TokenRefusal.MALFORMED


KEYS = Keyring((parse_key("acme:acme-key-0123456789"), parse_key("ops:ops-key-0123456789:admin")))


def test_credentials_take_keys_first_then_client_secrets_of_tenants_that_still_have_keys() -> None:
    creds = Credentials(KEYS, SECRET)
    assert creds.identify(b"acme-key-0123456789", NOW) == ACME
    assert creds.identify(token(), NOW) == grant()
    assert creds.identify(token(grant(Tenant("ops", admin=True))), NOW) == grant(
        Tenant("ops", admin=True)
    )
    # A tenant whose keys left the key file, or a scope its keys no longer have.
    assert creds.identify(token(grant(Tenant("ghost"))), NOW) is UNKNOWN_TENANT
    assert creds.identify(token(grant(Tenant("acme", admin=True))), NOW) is UNKNOWN_TENANT
    assert creds.identify(None, NOW) is NO_KEY
    assert creds.identify(b"wrong-key-0123456789", NOW) is NO_KEY
    refused = creds.identify(token(), NOW + 600)
    assert refused == Refused(TokenRefusal.EXPIRED.value)


def test_an_open_server_takes_anyone_but_still_checks_a_client_secret() -> None:
    creds = Credentials(Keyring(), SECRET)
    assert creds.identify(None, NOW) is ANONYMOUS
    assert creds.identify(b"anything", NOW) is ANONYMOUS
    anonymous = grant(ANONYMOUS)
    assert creds.identify(token(anonymous), NOW) == anonymous
    assert creds.identify(token(anonymous), NOW + 600) == Refused("client secret expired")
    assert creds.identify(token(grant()), NOW) is UNKNOWN_TENANT


def test_the_secret_comes_from_the_option_or_its_file_and_is_long_enough(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("  " + "f" * 40 + "\n", encoding="utf-8")
    assert load_token_secret(None, str(path)) == b"f" * 40
    assert load_token_secret("o" * 32, None) == b"o" * 32
    assert load_token_secret(None, None) is None
    path.write_text("f" * 31, encoding="utf-8")
    with pytest.raises(ValueError, match="at least 32 bytes"):
        load_token_secret(None, str(path))


def test_workers_get_one_secret_made_by_their_supervisor_unless_one_is_configured() -> None:
    made = worker_environ(ListenConfig(), {"PATH": "/bin"})
    assert made is not None and made["PATH"] == "/bin"
    assert len(made["SENSESTREAM_TOKEN_SECRET"]) >= 32
    again = worker_environ(ListenConfig(), {"PATH": "/bin"})
    assert (
        again is not None and again["SENSESTREAM_TOKEN_SECRET"] != made["SENSESTREAM_TOKEN_SECRET"]
    )
    # Configured: each worker reads it as its supervisor did (option, environment or file).
    assert worker_environ(ListenConfig(token_secret="o" * 32), {}) is None
    assert worker_environ(ListenConfig(token_secret_file="/etc/secret"), {}) is None
