"""Resume tokens: given for one tenant's stream, refused when forged, altered, expired,
presented by another tenant, or of another kind (a client secret)."""

from __future__ import annotations

import base64
import json

import pytest

from server.http.client_secrets import Grant, mint_token
from server.http.tenants import Tenant
from server.resume.tokens import ResumeClaim, ResumeRefusal, issue, verify

SECRET = b"s" * 32
CLAIM = ResumeClaim("acme", "call-7", "sess-1", issued_at=1000, expires_at=1600)


def test_a_token_gives_back_its_stream_to_its_tenant_until_it_expires() -> None:
    token = issue(SECRET, CLAIM)
    assert token.startswith("rs_")
    assert verify(SECRET, token, "acme", 1000.0) == CLAIM
    assert verify(SECRET, token, "acme", 1599.9) == CLAIM
    assert verify(SECRET, token, "acme", 1600.0) is ResumeRefusal.EXPIRED


def test_another_tenants_connection_cannot_take_the_stream() -> None:
    assert verify(SECRET, issue(SECRET, CLAIM), "globex", 1000.0) is ResumeRefusal.OTHER_TENANT


def test_a_token_signed_with_another_secret_or_altered_is_forged() -> None:
    token = issue(b"t" * 32, CLAIM)
    assert verify(SECRET, token, "acme", 1000.0) is ResumeRefusal.FORGED
    payload, _, signature = issue(SECRET, CLAIM)[3:].partition(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["stream"] = "call-8"  # someone else's stream, the signature kept
    altered = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    assert verify(SECRET, f"rs_{altered}.{signature}", "acme", 1000.0) is ResumeRefusal.FORGED


@pytest.mark.parametrize("token", ["", "rs_", "rs_abc", "rs_.x", "xx_abc.def", "rs_" + "a" * 2000])
def test_anything_else_is_malformed(token: str) -> None:
    assert verify(SECRET, token, "acme", 1000.0) is ResumeRefusal.MALFORMED


def test_a_client_secret_is_no_resume_token() -> None:
    grant = Grant(Tenant("acme", False), "tok", 1000, 1600, 1)
    secret_token = mint_token(SECRET, grant)
    assert verify(SECRET, secret_token, "acme", 1000.0) is ResumeRefusal.MALFORMED
    # The same payload under the resume prefix: the labels differ, so the MAC does not match.
    as_resume = "rs_" + secret_token.removeprefix("ek_")
    assert verify(SECRET, as_resume, "acme", 1000.0) is ResumeRefusal.FORGED
