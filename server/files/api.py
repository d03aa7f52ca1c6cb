"""OpenAI's file API over HTTP: `GET /v1/models` and `POST /v1/audio/transcriptions`.

The request and response formats are `streaming.protocols.openai.files`; an upload runs
through the live pipeline's session core and engine (`server.files.transcriptions`). A
client secret uploads only with the `files:write` scope, and each upload is one of the
sessions it may open.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from starlette.requests import HTTPConnection, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from engine.client import EngineClient
from engine.serving.builder import EngineReport
from server.config import ServerConfig
from server.files.transcriptions import FileAudio, FileJob
from server.files.uploads import Upload, read_upload
from server.host.admission import Kind
from server.host.admission import Scope as Refused
from server.host.local import Host
from server.http.access import permits
from server.http.client_secrets import Grant
from server.http.credentials import Refused as KeyRefused
from server.http.responses import json_response, response
from server.http.scopes import FILES_WRITE, INSUFFICIENT_SCOPE, challenge, scope_message
from server.http.tenants import Tenant
from streaming.events import Final
from streaming.protocols.openai import logprobs
from streaming.protocols.openai.files import (
    FileApiError,
    TranscriptionJob,
    full_text,
    parse_fields,
    render,
    sse_delta,
    sse_done,
    sse_error,
)
from streaming.session import SessionConfig
from streaming.vad.types import VadModel

log = logging.getLogger("sensestream.file_api")
#: Model names OpenAI's clients send; any is accepted and SenseVoice answers.
ALIASES = ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe")


def api_error(error: FileApiError) -> Response:
    # Retrying the same upload cannot help with these; the SDK honours this header.
    retry = "true" if error.status in (429, 503) else "false"
    extra = {"x-should-retry": retry}
    if error.code == INSUFFICIENT_SCOPE:
        extra |= challenge(FILES_WRITE)
    return json_response(error.status, error.body(), extra)


class UploadSlot:
    """One running transcription's place under `max_uploads`, and what it holds open:
    the spooled upload, its decoder and its engine session. Released exactly once."""

    def __init__(self, api: FileApi, lease: int) -> None:
        self._api = api
        self._lease = lease
        api._running += 1
        self.upload: Upload | None = None
        self.audio: FileAudio | None = None
        self.runner: FileJob | None = None
        self._released = False

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._api._running -= 1
        self._api.app.host.release(self._lease)
        if self.runner is not None:
            self.runner.close()
        if self.audio is not None:
            self.audio.close()
        if self.upload is not None:
            self.upload.close()


class SlotStream(StreamingResponse):
    """An SSE answer that releases its upload's slot however the response ends, even
    when its body is never iterated (a client gone before the first byte)."""

    def __init__(
        self, events: AsyncGenerator[str, None], slot: UploadSlot, media_type: str
    ) -> None:
        super().__init__(events, media_type=media_type)
        self._events = events
        self._slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slot.release()
            await self._events.aclose()


class FileApiHost(Protocol):
    """What the file API needs of the app that serves it (the app, `server.app.App`, sits
    above this package and is not imported here)."""

    @property
    def config(self) -> ServerConfig: ...
    @property
    def engine(self) -> EngineClient | None: ...
    @property
    def report(self) -> EngineReport | None: ...
    @property
    def vad(self) -> VadModel | None: ...
    @property
    def state(self) -> str: ...
    def origin_refusal(self, conn: HTTPConnection) -> Response | None: ...
    def authorized(self, conn: HTTPConnection) -> bool: ...
    def credential(self, conn: HTTPConnection) -> Tenant | Grant | KeyRefused: ...
    def session_config(self) -> SessionConfig: ...
    @property
    def host(self) -> Host: ...
    async def hold_while_starting(self) -> None: ...


class FileApi:
    """The OpenAI-compatible HTTP routes of one app."""

    def __init__(self, app: FileApiHost) -> None:
        self.app = app
        self._running = 0
        self._created = int(time.time())

    async def models(self, request: Request) -> Response:
        who = self._caller(request, need_ready=False)
        if isinstance(who, FileApiError):
            return api_error(who)
        report = self.app.report
        served = Path(report.model).name if report and report.model else "SenseVoiceSmall"
        names = (served, *ALIASES)
        data = [
            {"id": name, "object": "model", "created": self._created, "owned_by": "sensestream"}
            for name in names
        ]
        return json_response(200, {"object": "list", "data": data})

    async def transcriptions(self, request: Request) -> Response:
        await self.app.hold_while_starting()
        who = self._caller(request, need_ready=True, scope=FILES_WRITE)
        if isinstance(who, FileApiError):
            return api_error(who)
        limits = self.app.config.limits
        # One limit for the whole host: the lease is the supervisor's with several workers.
        lease = await self.app.host.acquire(Kind.UPLOAD, "")
        if isinstance(lease, Refused):
            message = f"the server is running its limit of {limits.max_uploads} transcriptions"
            return api_error(FileApiError(429, message, code="rate_limit_exceeded"))
        slot = UploadSlot(self, lease)
        handed_over = False
        try:
            used_up = await self._used_up(who)
            if used_up is not None:
                return api_error(used_up)
            answer = await self._transcribe(request, slot)
            handed_over = isinstance(answer, SlotStream)  # it releases the slot itself
            return answer
        finally:
            # Every other way out (a refusal, an answer, a client gone mid-upload,
            # cancellation, a fault) frees the slot here.
            if not handed_over:
                slot.release()

    async def _transcribe(self, request: Request, slot: UploadSlot) -> Response:
        """Read, decode and answer one upload; the slot holds what it opens."""
        limits = self.app.config.limits
        try:
            slot.upload = await read_upload(
                request.headers.get("content-type", ""),
                request.headers.get("content-length"),
                request.stream(),
                limits.max_upload_bytes,
            )
            job = parse_fields(slot.upload.fields)
            audio_file, name = slot.upload.audio_file(), slot.upload.label()
            slot.audio = await asyncio.to_thread(
                FileAudio, audio_file, limits.max_upload_seconds, name
            )
            slot.runner = runner = self._runner(slot.audio, self._config(request))
        except FileApiError as exc:
            return api_error(exc)
        duration_s = slot.audio.info.duration_s
        if job.stream:
            events = self._events(runner, job, duration_s)
            return SlotStream(events, slot, media_type="text/event-stream")
        try:
            finals = await runner.transcript(job)
        except FileApiError as exc:
            return api_error(exc)
        content_type, body = render(job, finals, duration_s)
        return response(200, body.encode(), content_type)

    async def _events(
        self, runner: FileJob, job: TranscriptionJob, duration_s: float
    ) -> AsyncGenerator[str, None]:
        finals: list[Final] = []
        with_logprobs = logprobs.entries if job.logprobs else None
        try:
            async for final in runner.finals(job):
                if final.transcript.text:
                    prefix = " " if finals else ""
                    tokens = final.transcript.tokens
                    finals.append(final)
                    entries = None if with_logprobs is None else with_logprobs(tokens, prefix)
                    yield sse_delta(prefix + final.transcript.text, entries)
            done = logprobs.of_finals(finals) if job.logprobs else None
            yield sse_done(full_text(finals), duration_s, done)
        except FileApiError as exc:
            yield sse_error(exc)

    def _runner(self, audio: FileAudio, config: SessionConfig) -> FileJob:
        app = self.app
        if app.engine is None or app.vad is None or app.report is None:
            raise FileApiError(503, "the server is not ready")
        return FileJob(app.engine, app.vad, config, audio)

    def _config(self, request: Request) -> SessionConfig:
        """The sessions' settings, under a client secret's pinned language and hotwords
        (not its audio format: a file's container names its own)."""
        config = self.app.session_config()
        who = self.app.credential(request)
        if isinstance(who, Grant):
            pins = replace(who.pins, encoding=None, sample_rate=None)
            config = replace(config, pinned=pins)
        return config

    async def _used_up(self, who: Tenant | Grant) -> FileApiError | None:
        """Count the upload as one of a client secret's sessions, host-wide, or 403 when
        it has opened its most (after the upload's slot: a 429 uses none)."""
        if not isinstance(who, Grant):
            return None
        limit, expires = who.max_sessions, who.expires_at
        if await self.app.host.use_token(who.token_id, limit, expires, time.time()):
            return None
        log.info("upload refused: client secret %s used up", who.token_id)
        message = f"The client secret is used up: it may open {limit} session(s)."
        return FileApiError(403, message, code="client_secret_used_up")

    def _caller(
        self, request: Request, need_ready: bool, scope: str | None = None
    ) -> Tenant | Grant | FileApiError:
        """The key's tenant or the client secret that may use the route (a secret only
        with `scope`), or the refusal."""
        app = self.app
        if app.origin_refusal(request) is not None:  # another site's page (OriginPolicy)
            return FileApiError(403, "origin not allowed", code="origin_not_allowed")
        who = app.credential(request) if app.authorized(request) else None  # counts a 401
        if who is None or isinstance(who, KeyRefused):
            return FileApiError(401, "missing or wrong API key", code="invalid_api_key")
        if scope is not None and not permits(who, scope):
            return FileApiError(403, scope_message(scope), code=INSUFFICIENT_SCOPE)
        if need_ready and app.state != "ready":
            return FileApiError(503, f"the server is {app.state}", code="unavailable")
        return who
