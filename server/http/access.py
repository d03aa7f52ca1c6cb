"""The gate of the routes that need a scope: a key passes, a client secret needs the scope.

A key speaks for its tenant with everything it granted before scopes existed (an admin
key's reach included); a client secret speaks for the tenant its mint named, and only
for what its scopes allow (`server.http.scopes`).
"""

from __future__ import annotations

from starlette.responses import Response

from server.http.client_secrets import Grant
from server.http.credentials import Refused
from server.http.responses import text_response, unauthorized
from server.http.scopes import INSUFFICIENT_SCOPE, challenge, scope_message
from server.http.tenants import Tenant


def speaks_for(who: Tenant | Grant) -> Tenant:
    """The tenant a key is, or a client secret speaks for."""
    return who.tenant if isinstance(who, Grant) else who


def permits(who: Tenant | Grant, scope: str) -> bool:
    """Whether a key's tenant or a client secret may do `scope`."""
    return isinstance(who, Tenant) or scope in who.scopes


def scoped(who: Tenant | Grant | Refused, scope: str) -> Tenant | Response:
    """The tenant a credential speaks for when it may do `scope`; else the refusal: 401
    for a refused credential, 403 `insufficient_scope` for a secret without the scope."""
    if isinstance(who, Refused):
        return unauthorized(who.reason)
    if not permits(who, scope):
        text = f"{INSUFFICIENT_SCOPE}: {scope_message(scope)}\n"
        return text_response(403, text, challenge(scope))
    return speaks_for(who)
