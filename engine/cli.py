"""Command line: `python -m engine transcribe --model DIR FILE...` prints one JSON line a file."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from engine.backends.registry import BACKEND_CHOICES, PRECISIONS, BackendOptions, create_backend
from engine.decoding.recognizer import Recognizer
from engine.errors import EngineError
from engine.features.audio_files import read_audio
from engine.model.directory import DEFAULT_MODEL_ID, resolve_model
from engine.types import LANGUAGES, SAMPLE_RATE, DecodeOptions, Transcript


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    tr = commands.add_parser("transcribe", help="transcribe audio files offline")
    tr.add_argument("files", nargs="+", type=Path, metavar="FILE")
    tr.add_argument("--model", default=DEFAULT_MODEL_ID, help="local dir or ModelScope id")
    tr.add_argument("--backend", choices=BACKEND_CHOICES, default="auto")
    tr.add_argument("--precision", choices=PRECISIONS, default="auto")
    tr.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    tr.add_argument("--threads", type=int, default=None, help="intra-op threads")
    tr.add_argument("--language", choices=LANGUAGES[:-1], default="auto")
    tr.add_argument("--itn", action=argparse.BooleanOptionalAction, default=True)
    tr.add_argument("--batch-size", type=int, default=8)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    """Run the CLI; exit 0 when every file decoded, 1 when any failed, 2 on setup errors."""
    args = build_parser().parse_args(argv)
    try:
        options = BackendOptions(args.backend, args.precision, args.device, args.threads)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        model_dir = resolve_model(args.model)
        recognizer = Recognizer(model_dir, create_backend(model_dir, options))
    except EngineError as exc:
        print(f"error [{exc.code}]: {exc}", file=sys.stderr)
        return 2
    decode_options = DecodeOptions(language=args.language, itn=args.itn)
    return transcribe_files(recognizer, args.files, decode_options, args.batch_size, out)


def transcribe_files(
    recognizer: Recognizer,
    files: Sequence[Path],
    options: DecodeOptions,
    batch_size: int,
    out: TextIO,
) -> int:
    """Decode all readable files together; each file gets a result line or an error line."""
    audios: list[np.ndarray] = []
    outcome: dict[int, EngineError | int] = {}  # file index -> error, or index into audios
    for i, path in enumerate(files):
        try:
            audios.append(read_audio(path))
            outcome[i] = len(audios) - 1
        except EngineError as exc:
            outcome[i] = exc
    started = time.perf_counter()
    results = recognizer.transcribe(audios, options, batch_size=batch_size)
    elapsed = time.perf_counter() - started
    failures = 0
    for i, path in enumerate(files):
        slot = outcome[i]
        result = slot if isinstance(slot, EngineError) else results[slot]
        if isinstance(result, EngineError):
            failures += 1
            _emit(out, _error_line(path, result))
        elif isinstance(slot, int):
            _emit(out, _result_line(path, audios[slot], result, recognizer.backend.name))
    print(f"decoded {len(audios)} file(s) in {elapsed:.2f} s", file=sys.stderr)
    return 1 if failures else 0


def _result_line(path: Path, audio: np.ndarray, t: Transcript, backend: str) -> dict[str, Any]:
    line: dict[str, Any] = {"file": str(path)}
    line.update(t.to_dict())
    line["duration_s"] = round(len(audio) / SAMPLE_RATE, 3)
    line["backend"] = backend
    return line


def _error_line(path: Path, exc: EngineError) -> dict[str, Any]:
    print(f"{path}: error [{exc.code}]: {exc}", file=sys.stderr)
    return {"file": str(path), "error": {"code": exc.code, "message": str(exc)}}


def _emit(out: TextIO, line: dict[str, Any]) -> None:
    out.write(json.dumps(line, ensure_ascii=False) + "\n")
    out.flush()
