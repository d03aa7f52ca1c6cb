"""Plain HTTP responses: static files, health, readiness, metrics, stats and refusals."""

from __future__ import annotations

import json
import mimetypes
from importlib.resources import files
from pathlib import Path
from typing import Any

from starlette.responses import Response

NO_STORE = {"Cache-Control": "no-store"}


def web_root() -> Path:
    """The installed web client's folder (package data, so a wheel serves the page too)."""
    return Path(str(files("web_client")))


def response(
    status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None
) -> Response:
    """A complete response that no cache keeps."""
    return Response(body, status, {**NO_STORE, **(extra or {})}, media_type=content_type)


def json_response(status: int, payload: Any, extra: dict[str, str] | None = None) -> Response:
    body = json.dumps(payload, ensure_ascii=False, indent=1).encode()
    return response(status, body, "application/json; charset=utf-8", extra)


def text_response(status: int, text: str, extra: dict[str, str] | None = None) -> Response:
    return response(status, text.encode(), "text/plain; charset=utf-8", extra)


def static_file(path: str, root: Path | None = None) -> Response:
    """A file from the web client, never outside it."""
    root = root or web_root()
    relative = "index.html" if path in ("", "/") else path.lstrip("/")
    target = (root / relative).resolve()
    servable = target.suffix in (".html", ".js", ".css", ".svg", ".png", ".ico")
    if not target.is_relative_to(root.resolve()) or not target.is_file() or not servable:
        return text_response(404, f"not found: {path}\n")
    content_type = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
    if content_type.startswith("text/") or content_type.endswith("javascript"):
        content_type += "; charset=utf-8"
    return response(200, target.read_bytes(), content_type)


def unauthorized(message: str) -> Response:
    return text_response(401, f"{message}\n", {"WWW-Authenticate": "Bearer"})
