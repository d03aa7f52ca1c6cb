"""`POST /v1/realtime/client_secrets`: a backend mints a short-lived token with its API key.

OpenAI's GA request and answer (`streaming.protocols.openai.client_secrets`); the token is
`server.http.client_secrets`'. A token never mints: only a key (or anyone, on a server
without keys, as the anonymous tenant) may. The token speaks for the minting key's tenant,
or for the one an admin key names (`tenant`), never as an admin; it streams, and does what
else the request's `scopes` name (`server.http.scopes`).
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Sequence
from typing import Protocol

from starlette.requests import HTTPConnection, Request
from starlette.responses import Response

from engine.types import Hotword
from server.config import ServerConfig
from server.http.client_secrets import MAX_TOKEN_CHARS, Grant, mint_token
from server.http.credentials import Credentials, Refused
from server.http.responses import json_response
from server.http.scopes import DEFAULT_SCOPES, INSUFFICIENT_SCOPE, TOKEN_SCOPES
from server.http.tenants import Tenant
from streaming.errors import UnsupportedHotwordError
from streaming.protocols.openai.client_secrets import (
    SecretRequest,
    parse_secret_request,
    secret_answer,
)
from streaming.protocols.openai.fields import RealtimeFieldError
from streaming.protocols.openai.files import FileApiError

log = logging.getLogger("sensestream.client_secrets")

#: A mint request is a small JSON object; more is refused unread.
MAX_BODY_BYTES = 64 * 1024


class SecretHost(Protocol):
    """What minting needs of the app (`server.app.App`, above this package)."""

    @property
    def config(self) -> ServerConfig: ...
    @property
    def credentials(self) -> Credentials: ...
    def origin_refusal(self, conn: HTTPConnection) -> Response | None: ...
    def credential(self, conn: HTTPConnection) -> Tenant | Grant | Refused: ...
    def hotword_refusal(self, hotwords: Sequence[Hotword]) -> str | None: ...


def openai_error(error: FileApiError) -> Response:
    return json_response(error.status, error.body(), {"x-should-retry": "false"})


class ClientSecretApi:
    """The mint route of one app."""

    def __init__(self, app: SecretHost) -> None:
        self.app = app

    async def create(self, request: Request) -> Response:
        """Mint a token for the caller's tenant, as the checked request asks."""
        try:
            minter = self._minter(request)
            asked = parse_secret_request(
                await json_body(request), self.app.config.limits.token_max_sessions, TOKEN_SCOPES
            )
            refused = self.app.hotword_refusal(asked.pins.hotwords or ())
            if refused is not None:  # every session of the token would be refused
                raise FileApiError(400, refused, "session", UnsupportedHotwordError.code)
            return self._minted(minter, asked)
        except RealtimeFieldError as exc:
            return openai_error(FileApiError(400, exc.message, exc.param, exc.openai_code))
        except FileApiError as exc:
            return openai_error(exc)

    def _minter(self, request: Request) -> Tenant:
        """The tenant a token is minted for; raises FileApiError for anyone else."""
        if self.app.origin_refusal(request) is not None:
            raise FileApiError(403, "origin not allowed", code="origin_not_allowed")
        who = self.app.credential(request)
        if isinstance(who, Grant):
            raise FileApiError(
                403, "A client secret cannot mint client secrets: use an API key.",
                code="token_cannot_mint",
            )  # fmt: skip
        if isinstance(who, Refused):
            raise FileApiError(401, who.reason, code="invalid_api_key")
        return who

    def _tenant(self, minter: Tenant, named: str | None) -> Tenant:
        """The tenant a token speaks for: the minting key's, or the one an admin key
        names; never with the admin scope. Raises FileApiError (403, 400)."""
        if named is None or named == minter.name:
            return Tenant(minter.name)
        if not minter.admin:
            raise FileApiError(
                403, "Only an admin key may mint a client secret for another tenant.",
                "tenant", INSUFFICIENT_SCOPE,
            )  # fmt: skip
        if not self.app.credentials.keyring.names(named):  # its token would be refused
            message = f"Invalid value: {named!r}. No key of that tenant is on this server."
            raise FileApiError(400, message, "tenant", "invalid_value")
        return Tenant(named)

    def _minted(self, minter: Tenant, asked: SecretRequest) -> Response:
        now = int(time.time())
        tenant = self._tenant(minter, asked.tenant)
        grant = Grant(
            tenant,
            secrets.token_urlsafe(12),
            now,
            now + asked.ttl_s,
            asked.max_sessions,
            asked.pins,
            DEFAULT_SCOPES | asked.scopes,
            minter,
        )
        value = mint_token(self.app.credentials.secret, grant)
        if len(value) > MAX_TOKEN_CHARS:  # it must fit the URLs and headers that carry it
            raise RealtimeFieldError(
                f"The session pins too much for a client secret of at most {MAX_TOKEN_CHARS} "
                "characters: name fewer keywords.",
                "session",
            )
        # The token id names it in the log; the token itself is never logged.
        log.info(
            "client secret %s minted for tenant %s by %s: %d s, up to %d session(s), scopes %s",
            grant.token_id,
            tenant.name or "(anonymous)",
            minter.name or "(anonymous)",
            asked.ttl_s,
            asked.max_sessions,
            " ".join(sorted(grant.scopes)),
        )
        answer = secret_answer(value, grant.expires_at, f"sess_{grant.token_id}", asked)
        return json_response(200, answer)


async def json_body(request: Request) -> object:
    """The request's JSON (an empty body is `{}`); raises FileApiError (413, 400)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise FileApiError(413, f"The request body is over {MAX_BODY_BYTES} bytes.")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        message = f"The request body is not valid JSON: {exc}"
        raise FileApiError(400, message, code="invalid_json") from exc
