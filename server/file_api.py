"""OpenAI's file API over HTTP: `GET /v1/models` and `POST /v1/audio/transcriptions`.

The request and response formats are `streaming.protocols.openai_files`; an upload runs
through the live pipeline's session core and engine (`server.transcriptions`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from server.http import json_response, response
from server.transcriptions import FileAudio, FileJob
from server.uploads import Upload, read_upload
from streaming.events import Final
from streaming.protocols.openai_files import (
    FileApiError,
    TranscriptionJob,
    full_text,
    parse_fields,
    render,
    sse_delta,
    sse_done,
    sse_error,
)

if TYPE_CHECKING:
    from server.app import App

log = logging.getLogger("sensestream.file_api")
#: Model names OpenAI's clients send; any is accepted and SenseVoice answers.
ALIASES = ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe")


def api_error(error: FileApiError) -> Response:
    # Retrying the same upload cannot help with these; the SDK honours this header.
    retry = "true" if error.status in (429, 503) else "false"
    return json_response(error.status, error.body(), {"x-should-retry": retry})


class FileApi:
    """The OpenAI-compatible HTTP routes of one app."""

    def __init__(self, app: App) -> None:
        self.app = app
        self._running = 0
        self._created = int(time.time())

    async def models(self, request: Request) -> Response:
        refusal = self._refusal(request, need_ready=False)
        if refusal is not None:
            return api_error(refusal)
        report = self.app.report
        served = Path(report.model).name if report and report.model else "SenseVoiceSmall"
        names = (served, *ALIASES)
        data = [
            {"id": name, "object": "model", "created": self._created, "owned_by": "sensestream"}
            for name in names
        ]
        return json_response(200, {"object": "list", "data": data})

    async def transcriptions(self, request: Request) -> Response:
        refusal = self._refusal(request, need_ready=True)
        if refusal is not None:
            return api_error(refusal)
        limits = self.app.config.limits
        if self._running >= limits.max_uploads:
            message = f"the server is running its limit of {limits.max_uploads} transcriptions"
            return api_error(FileApiError(429, message, code="rate_limit_exceeded"))
        self._running += 1
        upload: Upload | None = None
        try:
            upload = await read_upload(
                request.headers.get("content-type", ""),
                request.headers.get("content-length"),
                request.stream(),
                limits.max_upload_bytes,
            )
            job = parse_fields(upload.fields)
            audio = await asyncio.to_thread(FileAudio, upload.audio_file())
        except FileApiError as exc:
            self._running -= 1
            if upload is not None:
                upload.close()
            return api_error(exc)
        return await self._answer(upload, audio, job)

    async def _answer(self, upload: Upload, audio: FileAudio, job: TranscriptionJob) -> Response:
        """Run the job; the upload, the decoder and the slot are released when it ends."""
        try:
            runner = self._runner(audio)
        except FileApiError as exc:
            self._release(audio, upload)
            return api_error(exc)
        if job.stream:
            events = self._events(runner, job, audio, upload)
            return StreamingResponse(events, media_type="text/event-stream")
        try:
            finals = [final async for final in runner.finals(job)]
        except FileApiError as exc:
            return api_error(exc)
        finally:
            self._release(audio, upload)
        content_type, body = render(job, finals, audio.info.duration_s)
        return response(200, body.encode(), content_type)

    async def _events(
        self, runner: FileJob, job: TranscriptionJob, audio: FileAudio, upload: Upload
    ) -> AsyncIterator[str]:
        finals: list[Final] = []
        try:
            async for final in runner.finals(job):
                if final.transcript.text:
                    prefix = " " if finals else ""
                    finals.append(final)
                    yield sse_delta(prefix + final.transcript.text)
            yield sse_done(full_text(finals), audio.info.duration_s)
        except FileApiError as exc:
            yield sse_error(exc)
        finally:
            self._release(audio, upload)

    def _runner(self, audio: FileAudio) -> FileJob:
        app = self.app
        if app.engine is None or app.vad is None or app.report is None:
            raise FileApiError(503, "the server is not ready")
        return FileJob(app.engine, app.vad, app.session_config(), audio)

    def _release(self, audio: FileAudio, upload: Upload) -> None:
        audio.close()
        upload.close()
        self._running -= 1

    def _refusal(self, request: Request, need_ready: bool) -> FileApiError | None:
        app = self.app
        if not app.authorized(request):
            return FileApiError(401, "missing or wrong API key", code="invalid_api_key")
        if need_ready and app.state != "ready":
            return FileApiError(503, f"the server is {app.state}", code="unavailable")
        return None
