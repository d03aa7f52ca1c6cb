"""Key entries and their tenants, and the hub's per-tenant stream names (no server)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from server.config import load_config
from server.http.auth import load_keys
from server.http.tenants import ANONYMOUS, Claim, Keyring, Tenant, followed_key
from server.streams.hub import Publisher, StreamHub
from streaming.audio.decoder import AudioFormat
from streaming.commands import StreamOptions
from streaming.errors import StreamIdTakenError, UnauthorizedError
from streaming.events import Configured

ACME = "acme-key-0123456789abcdef"
OPS = "ops-key-0123456789abcdef"
PLAIN = "plain-key-0123456789abcdef"
OTHER = "other-plain-key-0123456789"


def identify(keys: Keyring, token: str | None) -> Tenant | None:
    return keys.identify(None if token is None else token.encode())


def key_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "keys"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_key_file_names_tenants_and_scopes(tmp_path: Path) -> None:
    text = f"# tenants\nacme:{ACME}  # the customer\nops:{OPS}:admin\n{PLAIN}\n\n{OTHER}\n"
    keys = load_keys(None, key_file(tmp_path, text))
    assert identify(keys, ACME) == Tenant("acme")
    assert identify(keys, OPS) == Tenant("ops", admin=True)
    plain, other = identify(keys, PLAIN), identify(keys, OTHER)
    assert plain is not None and other is not None
    assert plain.name.startswith("key-") and not plain.admin
    assert plain != other  # each plain key is a tenant of its own
    # Named after the key, not its line: reordering the file keeps every name.
    reordered = load_keys(None, key_file(tmp_path, f"{OTHER}\n{PLAIN}\n"))
    assert identify(reordered, PLAIN) == plain


def test_inline_keys_take_the_same_entries_and_a_name_may_have_two_keys() -> None:
    rotated = "acme-new-key-0123456789abcdef"
    keys = load_keys(f"acme:{ACME}, acme:{rotated}, {PLAIN}", None)
    assert identify(keys, ACME) == identify(keys, rotated) == Tenant("acme")
    assert identify(keys, "wrong-key-0123456789abcdef") is None
    assert identify(keys, None) is None


def test_without_keys_everyone_is_the_anonymous_tenant() -> None:
    keys = load_keys(None, None)
    assert identify(keys, None) == identify(keys, "anything") == ANONYMOUS


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ("acme:short", "at least 16 characters"),
        (f"acme:{ACME}:root", "unknown key scope"),
        (f"bad name:{ACME}", "tenant name"),
        (f"key-0123456789ab:{ACME}", "tenant name"),  # the form plain keys are named
        (f"a:{ACME}:admin:x", "keys hold no ':'"),
        (f"acme:{ACME}, ops:{ACME}", "two tenants"),
        (f"acme:{ACME}, acme:{ACME}:admin", "two tenants"),
        (" , ", "no API key"),
    ],
)
def test_a_bad_entry_fails_at_start_up(entries: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_keys(entries, None)


def test_a_toml_config_carries_the_same_entries(tmp_path: Path) -> None:
    path = tmp_path / "server.toml"
    keys = key_file(tmp_path, f"acme:{ACME}\n")
    path.write_text(
        f'[listen]\napi_keys = "ops:{OPS}:admin"\napi_keys_file = "{keys}"\n', encoding="utf-8"
    )
    listen = load_config(["--config", str(path)], {}).listen
    loaded = load_keys(listen.api_keys, listen.api_keys_file)
    assert identify(loaded, OPS) == Tenant("ops", admin=True)
    assert identify(loaded, ACME) == Tenant("acme")


def configured(stream_id: str = "call") -> Configured:
    return Configured("s", AudioFormat(), StreamOptions(), "m", False, (), stream_id)


def test_stream_ids_are_unique_within_a_tenant_only() -> None:
    hub = StreamHub()
    acme = hub.open(configured(), "s1", "twilio", 0.0, "acme")
    globex = hub.open(configured(), "s2", "v1", 0.0, "globex")
    with pytest.raises(StreamIdTakenError):
        hub.open(configured(), "s3", "v1", 0.0, "acme")
    assert [s["session_id"] for s in hub.describe(Tenant("acme"))] == ["s1"]
    assert [s["session_id"] for s in hub.describe(Tenant("ops", admin=True))] == ["s1", "s2"]
    # A follower names an id; it resolves within its own tenant (an admin's: any).
    for caller, tenant, stream in [
        (Tenant("acme"), None, acme),
        (Tenant("globex"), None, globex),
        (Tenant("ops", admin=True), "acme", acme),
    ]:
        key = followed_key(caller, "call", tenant)
        assert key is not None and hub.get(key) is stream
    assert followed_key(Tenant("globex"), "call", "acme") is None


def test_a_follower_waiting_for_an_id_is_not_woken_by_another_tenants_stream() -> None:
    async def scenario() -> tuple[bool, object, object]:
        hub = StreamHub()
        key = followed_key(Tenant("acme"), "call", None)
        assert key is not None
        waiting = asyncio.create_task(hub.wait_for(key, 30.0))
        await asyncio.sleep(0)
        hub.open(configured(), "s1", "v1", 0.0, "globex")
        for _ in range(3):
            await asyncio.sleep(0)
        woken = waiting.done()
        mine = hub.open(configured(), "s2", "v1", 0.0, "acme")
        return woken, await waiting, mine

    woken, found, mine = asyncio.run(scenario())
    assert not woken and found is mine


def test_a_stream_is_published_under_the_tenant_whose_key_was_checked() -> None:
    hub = StreamHub()
    keys = load_keys(f"acme:{ACME}", None)
    claim = Claim(keys)  # an in-band key (Twilio's start) not yet checked
    early = Publisher(hub, "s1", "twilio", 0.0, claim=claim).event(configured())
    assert isinstance(early, UnauthorizedError) and len(hub) == 0
    assert claim.check(ACME)
    assert Publisher(hub, "s2", "twilio", 0.0, claim=claim).event(configured()) is None
    assert [s["tenant"] for s in hub.describe()] == ["acme"]
    assert not claim.check("wrong-key-0123456789abcdef") and claim.tenant is None
