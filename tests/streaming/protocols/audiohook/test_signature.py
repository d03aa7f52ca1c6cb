"""Genesys' handshake signatures (RFC 9421) checked by the library the server uses, against
the RFC's own test vector and a signer written from the RFC in the tests."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable

import pytest

from streaming.protocols.audiohook.signature import (
    SignatureError,
    SignedRequest,
    check_handshake,
    decode_secret,
    verify,
)
from streaming.protocols.base import Handshake
from tests.callcentre.audiohook_emulator import genesys_signature

# RFC 9421 Appendix B.1.5 (test-shared-secret) and B.2.5 (a request signed with it).
RFC_SECRET = base64.b64decode(
    "uzvJfB4u3N0Jy4T7NZ75MDVcr8zSTInedJtkgcu46YW4XByzNJjxBdtjUkdJPBtbmHhIDi6pcl8jsasjlTMtDQ=="
)
RFC_HEADERS = {
    "host": "example.com",
    "date": "Tue, 20 Apr 2021 02:07:55 GMT",
    "content-type": "application/json",
    "signature-input": 'sig-b25=("date" "@authority" "content-type")'
    ';created=1618884473;keyid="test-shared-secret"',
    "signature": "sig-b25=:pxcQw6G3AjtMBQjwo8XzkZf/bws5LelbaMk5rGIGtE8=:",
}
RFC_TARGET = "/foo?param=Value&Pet=dog"
KEY = "genesys-api-key-0123456789"
SECRET = b"the integration's client secret!"
URL = "wss://asr.example.com/audiohook?tenant=a"


def rfc_request(**headers: str) -> SignedRequest:
    return SignedRequest(
        "POST", "https://example.com" + RFC_TARGET, RFC_HEADERS | headers, RFC_TARGET
    )


def test_the_rfcs_hmac_example_verifies() -> None:
    verify(rfc_request(), RFC_SECRET, "test-shared-secret", covered=("date",), max_age=None)


def test_a_changed_covered_field_fails_the_rfcs_example() -> None:
    with pytest.raises(SignatureError, match="bad signature"):
        verify(
            rfc_request(date="Wed, 21 Apr 2021 02:07:55 GMT"),
            RFC_SECRET,
            "test-shared-secret",
            covered=(),
            max_age=None,
        )


def test_a_signature_must_cover_what_is_required_and_be_fresh() -> None:
    with pytest.raises(SignatureError, match="x-api-key"):
        verify(
            rfc_request(), RFC_SECRET, "test-shared-secret", covered=("x-api-key",), max_age=None
        )
    with pytest.raises(SignatureError, match="age"):
        verify(rfc_request(), RFC_SECRET, "test-shared-secret", covered=())  # from 2021


def genesys_handshake(url: str = URL, secret: bytes = SECRET, **changes: str) -> Handshake:
    headers = {
        "Audiohook-Organization-Id": "d7934305-0972-4844-938e-9060eef73d05",
        "Audiohook-Correlation-Id": "30b0e395-84d3-4570-ac13-9a62d8f514c0",
        "Audiohook-Session-Id": "e160e428-53e2-487c-977d-96989bf5c99d",
        "X-API-KEY": KEY,
    }
    signed = headers | genesys_signature(url, headers, KEY, secret)
    return Handshake(headers={k.lower(): v for k, v in (signed | changes).items()}, url=url)


def test_genesys_signed_handshakes_verify() -> None:
    check_handshake(genesys_handshake(), SECRET)
    # The default port is no part of the authority, on either side.
    check_handshake(genesys_handshake("ws://127.0.0.1:80/audiohook"), SECRET)
    check_handshake(genesys_handshake("ws://127.0.0.1:8765/audiohook"), SECRET)


#: Made when the test runs: a signature lives 30 s, and collection may be longer ago.
REFUSED: dict[str, tuple[Callable[[], Handshake], str]] = {
    "wrong secret": (lambda: genesys_handshake(secret=b"another secret"), "did not match"),
    "tampered": (lambda: genesys_handshake(**{"Audiohook-Session-Id": "0" * 36}), "did not match"),
    "another key": (lambda: genesys_handshake(**{"X-API-KEY": "another-key-0123456789"}), "keyid"),
    "missing": (lambda: Handshake(headers={"x-api-key": KEY}, url=URL), "not signed"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_anything_else_is_refused_with_its_reason(case: str) -> None:
    make, reason = REFUSED[case]
    with pytest.raises(SignatureError, match=reason):
        check_handshake(make(), SECRET)


def test_a_signature_for_another_url_is_refused() -> None:
    signed = genesys_handshake("wss://asr.example.com/audiohook")
    moved = Handshake(headers=dict(signed.headers), url="wss://asr.example.com/other")
    with pytest.raises(SignatureError, match="did not match"):
        check_handshake(moved, SECRET)


def test_an_expired_signature_is_refused() -> None:
    headers = {
        "Audiohook-Organization-Id": "o",
        "Audiohook-Correlation-Id": "c",
        "Audiohook-Session-Id": "s",
        "X-API-KEY": KEY,
    }
    old = headers | genesys_signature(URL, headers, KEY, SECRET, now=time.time() - 120)
    handshake = Handshake(headers={k.lower(): v for k, v in old.items()}, url=URL)
    with pytest.raises(SignatureError, match="expires"):
        check_handshake(handshake, SECRET)


def test_client_secrets_are_base64() -> None:
    assert decode_secret(base64.b64encode(SECRET).decode()) == SECRET
    for bad in ("not base64!", ""):
        with pytest.raises(ValueError, match=r"base64|empty"):
            decode_secret(bad)
