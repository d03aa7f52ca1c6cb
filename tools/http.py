"""Plain HTTP GETs against a server's /readyz, /stats and /metrics."""

from __future__ import annotations

import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping


def get(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
    verify: bool = True,
) -> tuple[int, str]:
    """(status, body) of a GET; an HTTP error status is an answer, not an exception.

    Raises OSError (urllib's URLError is one) when nothing answers. `verify=False` is for
    a server this process started itself: its test certificate is self-signed.
    """
    request = urllib.request.Request(url, headers=dict(headers or {}))
    context = None if verify else _unverified()
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as answer:
            body: bytes = answer.read()
            return int(answer.status), body.decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def _unverified() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def http_base(ws_url: str) -> str:
    """http(s)://host:port for a ws(s)://host:port/ws URL: where its plain routes answer."""
    match = re.match(r"^ws(s?)://([^/]+)", ws_url)
    if match is None:
        raise ValueError(f"not a ws:// URL: {ws_url}")
    return f"http{match.group(1)}://{match.group(2)}"
