"""`sensestream transcribe FILE... [OPTIONS]`: files transcribed here by the server's own path.

Each file goes where an upload to the server's file API goes: the voice detector cuts it
into utterances, text is committed at the pauses inside them as `--commit` says, and the
engine decodes, all in this process. So a file gets the text here that it gets uploaded
or streamed to a server started with the same options (`sensestream serve --help` lists
them). One JSON line a file, as the file API's `verbose_json` with its `file` and the
backend; a file that cannot be read or decoded gets an error line instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from prometheus_client import CollectorRegistry

from engine.client import EngineClient
from engine.errors import EngineError
from server.app import make_vad, session_config
from server.config import ServerConfig, build_parser, config_from_args, current_environ
from server.engines.attach import open_local
from server.files.transcriptions import FileAudio, FileJob
from streaming.commands import CLIENT_LANGUAGES
from streaming.protocols.openai.files import FileApiError, TranscriptionJob, verbose
from streaming.session import SessionConfig
from streaming.vad.types import VadModel

USAGE = "sensestream transcribe FILE... [--language LANG] [--OPTION VALUE | --[no-]FLAG]..."


def parser() -> argparse.ArgumentParser:
    """The server's options, the files, and the file API's `language`."""
    p = build_parser()
    p.prog, p.usage = "sensestream transcribe", USAGE
    p.description = (__doc__ or "").split("\n\n")[1]
    p.add_argument("files", nargs="+", type=Path, metavar="FILE")
    p.add_argument(
        "--language",
        default="auto",
        choices=CLIENT_LANGUAGES,
        help="the language spoken, as the file API's `language` (default: auto, detected)",
    )
    return p


@dataclass(frozen=True, slots=True)
class Transcriber:
    """The engine, the voice detector and the sessions' settings, loaded once."""

    engine: EngineClient
    vad: VadModel
    settings: SessionConfig
    backend: str
    max_seconds: float


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    """0 when every file was transcribed, 1 when any failed, 2 when nothing could start."""
    environ = current_environ()
    args = parser().parse_intermixed_args(argv)
    try:
        config = config_from_args(args, environ)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # The server's start-up lines (its model, its tuning) go to stderr at warning level.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        return asyncio.run(transcribe_files(config, args.files, args.language, environ, out))
    except EngineError as exc:
        print(f"error [{exc.code}]: {exc}", file=sys.stderr)
        return 2


async def transcribe_files(
    config: ServerConfig,
    files: Sequence[Path],
    language: str,
    environ: Mapping[str, str],
    out: TextIO,
) -> int:
    """Load the engine and the voice detector, then each file in turn: one line each."""
    engine, report = await open_local(config, environ, CollectorRegistry())
    try:
        here = Transcriber(
            engine,
            await asyncio.to_thread(make_vad, config),
            session_config(config, report),
            report.backend,
            config.limits.max_upload_seconds,
        )
        failures = 0
        for path in files:
            line = await transcribe_file(here, path, language)
            failures += "error" in line
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
            out.flush()
    finally:
        await engine.close()
    return 1 if failures else 0


async def transcribe_file(here: Transcriber, path: Path, language: str) -> dict[str, Any]:
    """The file's `verbose_json` (segments and words), or its error."""
    job = TranscriptionJob(
        model="",
        language=language,
        response_format="verbose_json",
        granularities=frozenset({"segment", "word"}),
    )
    try:
        with path.open("rb") as file:
            audio = await asyncio.to_thread(FileAudio, file, here.max_seconds, path.name)
            runner = FileJob(here.engine, here.vad, here.settings, audio)
            try:
                finals = await runner.transcript(job)
            finally:
                runner.close()
                audio.close()
    except OSError as exc:
        return error_line(path, "unreadable", f"cannot read {path}: {exc.strerror or exc}")
    except FileApiError as exc:
        return error_line(path, exc.code or "invalid_audio", exc.message)
    return {
        "file": str(path),
        **verbose(job, finals, audio.info.duration_s),
        "backend": here.backend,
    }


def error_line(path: Path, code: str, message: str) -> dict[str, Any]:
    print(f"{path}: error [{code}]: {message}", file=sys.stderr)
    return {"file": str(path), "error": {"code": code, "message": message}}
