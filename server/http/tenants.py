"""Tenants: who an API key speaks for, what it may see, and how its streams are named.

Sans-I/O: key entries are parsed and presented keys matched here; `server.http.auth` reads the
key file and the request. A key entry is `name:key[:scope,...]`, or a plain `key` whose
tenant is named after a hash of the key (see `plain_name`). Several keys may share a
name (a rotation: the old and the new key are one tenant). With no keys at all, every
client is the one ANONYMOUS tenant, as before tenants existed.

A stream belongs to the tenant whose key started it, and its id is unique only within
that tenant: the hub names it `stream_key(tenant, id)`. A key lists and follows only its
own tenant's streams unless it has the `admin` scope; a client secret only its own
tenant's, and only with the `streams:read` scope (`server.http.scopes`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, field

#: A tenant's name: it shows in listings and in an admin's `?tenant=`, so URL-safe.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: The names plain keys get; an entry may not take one (it would join that key's tenant).
PLAIN_NAME = re.compile(r"key-[0-9a-f]{12}")
SCOPES = frozenset({"admin"})
MIN_KEY_CHARS = 16


@dataclass(frozen=True, slots=True)
class Tenant:
    """Who a key speaks for: the name its streams belong to, and whether it sees all."""

    name: str
    admin: bool = False

    def sees(self, owner: str) -> bool:
        """Whether this tenant may list or follow a stream that `owner` started."""
        return self.admin or owner == self.name


#: Everyone, when the server has no keys: one namespace, as before tenants existed.
ANONYMOUS = Tenant("")


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One accepted key and the tenant it speaks for."""

    tenant: Tenant
    secret: bytes = field(repr=False)


def plain_name(secret: str) -> str:
    """A plain key's tenant name: `key-` and 12 hex digits of its SHA-256.

    Named after the key, not its line, so the name stays the same when lines are added,
    removed or reordered, and on every server given the same file. 48 bits of a hash of
    a key of 16+ characters tell nothing usable about the key.
    """
    return "key-" + hashlib.sha256(secret.encode()).hexdigest()[:12]


def parse_key(entry: str) -> ApiKey:
    """One `key`, `name:key` or `name:key:scope[,scope]` entry; raises ValueError."""
    parts = entry.split(":")
    if len(parts) > 3:
        raise ValueError("a key entry is key, name:key or name:key:scopes (keys hold no ':')")
    if len(parts) == 1:
        name, secret, scopes = plain_name(entry), entry, ""
    else:
        name, secret, scopes = parts[0], parts[1], parts[2] if len(parts) == 3 else ""
        if not NAME.fullmatch(name) or PLAIN_NAME.fullmatch(name):
            raise ValueError(
                f"tenant name {name!r} must be 1 to 64 letters, digits or ._- "
                "(and not of the form key-<12 hex digits>, which plain keys are named)"
            )
    if len(secret) < MIN_KEY_CHARS:
        raise ValueError(f"API keys must be at least {MIN_KEY_CHARS} characters")
    wanted = {s.strip() for s in scopes.split(",") if s.strip()}
    unknown = sorted(wanted - SCOPES)
    if unknown:
        raise ValueError(f"unknown key scope(s) {', '.join(unknown)}: known are admin")
    return ApiKey(Tenant(name, admin="admin" in wanted), secret.encode())


@dataclass(frozen=True, slots=True)
class Keyring:
    """Every accepted key; empty means the server is open (one anonymous tenant)."""

    keys: tuple[ApiKey, ...] = ()

    def __post_init__(self) -> None:
        owners: dict[bytes, Tenant] = {}
        for key in self.keys:
            if owners.setdefault(key.secret, key.tenant) != key.tenant:
                raise ValueError("the same API key is listed for two tenants or scopes")

    def __len__(self) -> int:
        return len(self.keys)

    def identify(self, token: bytes | None) -> Tenant | None:
        """The tenant a presented key speaks for (ANONYMOUS with no keys), or None.

        Every key is compared, without stopping at a match, so timing tells nothing.
        """
        if not self.keys:
            return ANONYMOUS
        if token is None:
            return None
        found = None
        for key in self.keys:
            if hmac.compare_digest(token, key.secret):
                found = key.tenant
        return found

    def names(self, name: str) -> bool:
        """Whether some key speaks for the tenant `name`, in any scope (with no keys: the
        anonymous tenant only)."""
        if not self.keys:
            return name == ANONYMOUS.name
        return any(key.tenant.name == name for key in self.keys)

    def holds(self, tenant: Tenant) -> bool:
        """Whether some key still speaks for `tenant` (name and scope): a client secret
        minted with a key outlives it only while its tenant has a key."""
        if not self.keys:
            return tenant == ANONYMOUS
        return any(key.tenant == tenant for key in self.keys)


def stream_key(tenant: str, stream_id: str) -> str:
    """A stream's name in the hub: ids are unique within a tenant, not across tenants.

    The anonymous tenant's are bare; every other is `tenant/id`. Neither a tenant name
    nor a stream id holds "/", so no two (tenant, id) pairs share a name.
    """
    return f"{tenant}/{stream_id}" if tenant else stream_id


def followed_key(caller: Tenant, stream_id: str, tenant: str | None) -> str | None:
    """The hub name of the stream a follower asks for, or None when it may not ask.

    `tenant` (`?tenant=`) names another tenant's namespace, which only an admin may do.
    """
    if tenant is None or tenant == caller.name:
        return stream_key(caller.name, stream_id)
    if not caller.admin:
        return None
    return stream_key(tenant, stream_id)


class Claim:
    """Which tenant one connection speaks for: known at the handshake, or once its
    protocol's in-band key (Twilio's `start`) has been checked."""

    def __init__(self, keyring: Keyring, tenant: Tenant | None = None) -> None:
        self._keyring = keyring
        self.tenant = tenant

    def check(self, key: str | None) -> bool:
        """CodecSettings.check_key for this connection: it remembers whose key it was."""
        self.tenant = self._keyring.identify(None if key is None else key.encode())
        return self.tenant is not None
