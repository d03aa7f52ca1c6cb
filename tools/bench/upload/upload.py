"""A multipart upload of one file to /v1/audio/transcriptions, streamed from disk."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class UploadResult:
    status: int
    seconds: float  # from the first byte sent to the whole answer
    finals: int
    error: str | None = None


def _parts(path: Path, boundary: str, fields: dict[str, str]) -> tuple[list[bytes], bytes]:
    head = b""
    for name, value in fields.items():
        head += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        ).encode()
    head += (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
        f'filename="{path.name}"\r\nContent-Type: audio/wav\r\n\r\n'
    ).encode()
    return [head], f"\r\n--{boundary}--\r\n".encode()


def _body(path: Path, head: list[bytes], tail: bytes) -> Iterator[bytes]:
    yield from head
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk
    yield tail


def upload(http_url: str, path: Path, api_key: str | None = None) -> UploadResult:
    """POST the file (verbose_json, so the answer counts its segments); blocks until done."""
    boundary = uuid.uuid4().hex
    fields = {"model": "whisper-1", "response_format": "verbose_json"}
    head, tail = _parts(path, boundary, fields)
    length = sum(len(h) for h in head) + path.stat().st_size + len(tail)
    headers = {
        "Content-Type": f"multipart/form-data; boundary={boundary}",
        "Content-Length": str(length),
    }
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(
        f"{http_url.rstrip('/')}/v1/audio/transcriptions",
        data=_body(path, head, tail),
        headers=headers,
        method="POST",
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=3600) as response:
            answer = json.loads(response.read())
            seconds = time.monotonic() - started
            return UploadResult(response.status, seconds, len(answer.get("segments", [])))
    except urllib.error.HTTPError as exc:
        return UploadResult(exc.code, time.monotonic() - started, 0, exc.read()[:300].decode())
