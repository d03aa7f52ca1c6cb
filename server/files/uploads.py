"""A multipart/form-data upload read as it streams in: fields in memory, the file spooled.

The file part goes to a temporary file that stays in memory only while small, so a long
recording is never held whole in memory; the whole body is bounded by a byte limit.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import IO

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from streaming.protocols.openai.files import MAX_KNOWN_SPEAKERS, FileApiError

SPOOL_BYTES = 1 << 20  # a file part larger than this goes to disk
MAX_FIELD_BYTES = 64 * 1024
# A known speaker's reference clip comes as a data URL in a text field: up to 10 s of
# audio, base64 (10 s of 48 kHz 16-bit stereo is 2.6 MB so).
MAX_REFERENCE_BYTES = 4 * 1024 * 1024
REFERENCES = "known_speaker_references"  # at most MAX_KNOWN_SPEAKERS such fields
MAX_FIELDS = 32
MAX_NAME_CHARS = 80  # of a filename quoted back in an error
UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")


@dataclass
class Upload:
    """The form's text fields and its one file (spooled), once the body has been read."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    file: IO[bytes] | None = None
    filename: str = ""
    file_bytes: int = 0

    def label(self) -> str:
        """The file's name as errors and logs quote it: no folders, no control characters."""
        name = UNPRINTABLE.sub("?", self.filename.replace("\\", "/").rsplit("/", 1)[-1]).strip()
        if len(name) > MAX_NAME_CHARS:
            name = name[: MAX_NAME_CHARS - 1] + "…"
        return name or "the uploaded file"

    def audio_file(self) -> IO[bytes]:
        if self.file is None:
            raise FileApiError(400, "the form has no audio file", "file")
        return self.file

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


class _Reader:
    """python-multipart callbacks that fill an Upload."""

    def __init__(self, upload: Upload) -> None:
        self.upload = upload
        self._header_field = b""
        self._header_value = b""
        self._disposition = b""
        self._name = ""
        self._value = bytearray()
        self._is_file = False

    def callbacks(self) -> dict[str, object]:
        return {
            "on_header_field": self._on_header_field,
            "on_header_value": self._on_header_value,
            "on_header_end": self._on_header_end,
            "on_headers_finished": self._on_headers_finished,
            "on_part_data": self._on_part_data,
            "on_part_end": self._on_part_end,
        }

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_field += data[start:end]

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _on_header_end(self) -> None:
        if self._header_field.lower() == b"content-disposition":
            self._disposition = self._header_value
        self._header_field, self._header_value = b"", b""

    def _on_headers_finished(self) -> None:
        _, params = parse_options_header(self._disposition)
        self._name = params.get(b"name", b"").decode("utf-8", "replace")
        filename = params.get(b"filename")
        self._is_file = filename is not None
        self._value = bytearray()
        self._disposition = b""
        if not self._is_file:
            return
        if self.upload.file is not None:
            raise FileApiError(400, "send exactly one file", self._name)
        self.upload.filename = (filename or b"").decode("utf-8", "replace")
        # The Upload owns the file and closes it (Upload.close).
        self.upload.file = tempfile.SpooledTemporaryFile(SPOOL_BYTES)  # noqa: SIM115

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._is_file and self.upload.file is not None:
            self.upload.file.write(data[start:end])
            self.upload.file_bytes += end - start
            return
        self._value += data[start:end]
        big = self._name.startswith(REFERENCES)
        if len(self._value) > (MAX_REFERENCE_BYTES if big else MAX_FIELD_BYTES):
            raise FileApiError(400, f"form field {self._name!r} is too long", self._name)

    def _on_part_end(self) -> None:
        if self._is_file:
            return
        if sum(len(v) for v in self.upload.fields.values()) >= MAX_FIELDS:
            raise FileApiError(400, "too many form fields")
        if self._name.startswith(REFERENCES):
            given = sum(len(v) for k, v in self.upload.fields.items() if k.startswith(REFERENCES))
            if given >= MAX_KNOWN_SPEAKERS:
                message = f"at most {MAX_KNOWN_SPEAKERS} known speakers"
                raise FileApiError(400, message, self._name)
        value = self._value.decode("utf-8", "replace")
        self.upload.fields.setdefault(self._name, []).append(value)


async def read_upload(
    content_type: str, content_length: str | None, body: AsyncIterator[bytes], limit: int
) -> Upload:
    """Parse a streaming multipart body; FileApiError for a bad or oversized one."""
    kind, params = parse_options_header(content_type)
    boundary = params.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise FileApiError(415, "send the audio as multipart/form-data", "file")
    if content_length is not None and content_length.isdigit() and int(content_length) > limit:
        raise FileApiError(413, f"the upload is over the {limit >> 20} MiB limit", "file")
    upload = Upload()
    complete = False
    try:
        await _parse(upload, boundary, body, limit)
        complete = True
    finally:
        # A refusal, a client gone mid-body or a cancellation: the spool goes with it.
        if not complete:
            upload.close()
    return upload


async def _parse(upload: Upload, boundary: bytes, body: AsyncIterator[bytes], limit: int) -> None:
    reader = _Reader(upload)
    parser = MultipartParser(boundary, reader.callbacks())  # type: ignore[arg-type]
    received = 0
    try:
        async for chunk in body:
            received += len(chunk)
            if received > limit:
                raise FileApiError(413, f"the upload is over the {limit >> 20} MiB limit", "file")
            parser.write(chunk)
        parser.finalize()
    except MultipartParseError as exc:
        raise FileApiError(400, f"malformed multipart body: {exc}") from exc
    if upload.file is None or upload.file_bytes == 0:
        raise FileApiError(400, "the form has no audio file", "file")
    upload.file.seek(0)
