"""Who a presented credential speaks for: an API key, or a client secret minted with one.

Sans-I/O: `server.http.auth` reads the value from the request, and `now` is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from server.http.client_secrets import PREFIX, Grant, TokenRefusal, verify_token
from server.http.tenants import ANONYMOUS, Keyring, Tenant


@dataclass(frozen=True, slots=True)
class Refused:
    """A credential that is not accepted, and why in words (for the 401 and the log;
    never the credential itself)."""

    reason: str


NO_KEY = Refused("missing or wrong API key")
#: The key the token was minted with is gone from the key file (how tokens are revoked).
UNKNOWN_TENANT = Refused("client secret's tenant has no key on this server")


@dataclass(frozen=True, slots=True)
class Credentials:
    """The server's keys and the secret its client secrets are signed with."""

    keyring: Keyring
    secret: bytes = field(repr=False)

    def identify(self, presented: bytes | None, now: float) -> Tenant | Grant | Refused:
        """The tenant of a key, the grant of a client secret, or why neither.

        Keys come first (a key may happen to begin as a token does). A client secret is
        checked even on a server without keys: its pins and session bound still hold.
        With no keys, anything else is the anonymous tenant, as before tokens existed.
        """
        if self.keyring:
            tenant = self.keyring.identify(presented)
            if tenant is not None:
                return tenant
        if presented is not None and presented.startswith(PREFIX):
            return self.grant(presented, now)
        return NO_KEY if self.keyring else ANONYMOUS

    def grant(self, presented: bytes, now: float) -> Grant | Refused:
        """A client secret's grant, while the key that minted it (its tenant and scope)
        is still here, and its own tenant, when an admin key named another, has a key."""
        found = verify_token(self.secret, presented, now)
        if isinstance(found, TokenRefusal):
            return Refused(found.value)
        if not self.keyring.holds(found.minted_by) or not self.keyring.names(found.tenant.name):
            return UNKNOWN_TENANT
        return found
