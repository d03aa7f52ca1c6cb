"""What a client secret may do besides streaming: the scopes its mint names.

An API key does whatever its tenant may, as before scopes existed. A client secret always
streams (the sessions it pins); it lists and follows its tenant's streams only with
`streams:read`, and uploads to the file API only with `files:write`. A secret minted
without naming any does nothing else, so a page's secret that leaks opens only sessions.
"""

from __future__ import annotations

STREAM = "stream"
STREAMS_READ = "streams:read"
FILES_WRITE = "files:write"
#: Every scope a mint may name, in the order refusals list them.
TOKEN_SCOPES = (STREAM, STREAMS_READ, FILES_WRITE)
#: What every client secret has, named or not.
DEFAULT_SCOPES = frozenset({STREAM})
#: The error code (RFC 6750's) of a credential that is valid but may not do this.
INSUFFICIENT_SCOPE = "insufficient_scope"
#: What each scope lets a client secret do, for refusals.
DOES = {STREAM: "stream", STREAMS_READ: "list or follow streams", FILES_WRITE: "upload files"}


def scope_message(scope: str) -> str:
    """Why a client secret without `scope` is refused, and how to mint one with it."""
    return (
        f"this client secret may not {DOES[scope]}: mint it with the scope {scope!r} "
        '("scopes" in the mint request)'
    )


def challenge(scope: str) -> dict[str, str]:
    """RFC 6750's header for a Bearer token that lacks a scope."""
    return {"WWW-Authenticate": f'Bearer error="{INSUFFICIENT_SCOPE}", scope="{scope}"'}
