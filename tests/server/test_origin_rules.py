"""OriginPolicy: which browser Origins count as the server's own page, listed, or any."""

from __future__ import annotations

import pytest

from server.config import ListenConfig
from server.http.auth import OriginPolicy

OWN = "127.0.0.1:8765"


def policy(
    allowed: str | None = None, host: str = "127.0.0.1", public: str | None = None
) -> OriginPolicy:
    return ListenConfig(host=host, allowed_origins=allowed, public_url=public).origin_policy()


@pytest.mark.parametrize(
    ("origin", "scheme", "host", "allowed"),
    [
        (None, "ws", OWN, True),  # not a browser
        ("http://127.0.0.1:8765", "ws", OWN, True),
        ("http://127.0.0.1:8765", "http", OWN, True),
        ("https://127.0.0.1:8765", "wss", OWN, True),
        ("HTTP://LOCALHOST:8765", "ws", "localhost:8765", True),
        ("http://[::1]:8765", "ws", "[::1]:8765", True),
        ("http://127.0.0.1", "ws", "127.0.0.1:80", True),  # the default port, either way
        ("https://evil.example", "ws", OWN, False),
        ("https://127.0.0.1:8765", "ws", OWN, False),  # another scheme: another origin
        ("http://127.0.0.1:8766", "ws", OWN, False),
        ("null", "ws", OWN, False),  # a sandboxed frame or a file:// page
        ("http://127.0.0.1:8765", "ws", None, False),  # no Host to be the same as
        # DNS rebinding: the attacker's name resolves to 127.0.0.1; Origin and Host agree.
        ("http://rebind.example:8765", "ws", "rebind.example:8765", False),
    ],
)
def test_by_default_only_the_servers_own_page_is_let_in(
    origin: str | None, scheme: str, host: str | None, allowed: bool
) -> None:
    assert policy().allows(origin, scheme, host) is allowed


def test_off_loopback_a_named_host_is_the_own_page_unless_the_public_url_pins_it() -> None:
    lan = ("http://asr.lan:8765", "ws", "asr.lan:8765")
    assert policy(host="0.0.0.0").allows(*lan)
    pinned = policy(host="0.0.0.0", public="https://asr.example.com/speech/")
    assert not pinned.allows(*lan)
    # Behind a TLS proxy the server sees plain ws and its own Host; the public origin counts.
    assert pinned.allows("https://asr.example.com", "ws", "10.0.0.5:8765")
    assert pinned.allows("http://10.0.0.5:8765", "ws", "10.0.0.5:8765")  # an IP literal


def test_a_list_adds_origins_to_the_own_page() -> None:
    listed = policy("https://Captions.example/")
    assert listed.allows("https://captions.example", "ws", OWN)
    assert listed.allows("http://127.0.0.1:8765", "ws", OWN)  # the page keeps working
    assert not listed.allows("https://evil.example", "ws", OWN)
    assert not listed.allows("http://rebind.example:8765", "ws", "rebind.example:8765")
    both = policy("self, https://captions.example:443")  # `self` is accepted, and implied
    assert both.allows("https://captions.example", "ws", OWN)
    assert both.allows("http://127.0.0.1:8765", "ws", OWN)
    assert not both.allows("https://evil.example", "ws", OWN)


def test_a_star_allows_every_origin() -> None:
    anything = policy("*")
    assert anything.allows("https://evil.example", "ws", OWN)
    assert anything.allows("null", "ws", OWN)


@pytest.mark.parametrize(
    "entry", ["captions.example", "https://captions.example/app", "ftp://captions.example", "null"]
)
def test_an_entry_that_is_no_origin_fails_at_start_up(entry: str) -> None:
    with pytest.raises(ValueError, match="allowed_origins entry"):
        policy(entry)
