"""Export a SenseVoiceSmall model dir to ONNX: encoder + CTC + argmax, dynamic batch and length.

`--scored` writes the scored graphs (`model.scored.*.onnx`: each frame's 8 best candidates
too), which the server serves with `--confidence` (its default), instead of the plain ones.

Example:
    python scripts/export_onnx.py --model models/test-full --int8 --fp16 --scored
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from engine.backends.onnx_export import export_onnx
from engine.backends.registry import write_export_stamps
from engine.errors import EngineError
from engine.model.directory import resolve_model


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="local model dir or ModelScope id")
    parser.add_argument("--int8", action="store_true", help="also write model.int8.onnx")
    parser.add_argument("--fp16", action="store_true", help="also write model.fp16.onnx")
    parser.add_argument("--out", type=Path, default=None, help="output dir (default: model dir)")
    parser.add_argument(
        "--scored", action="store_true", help="the scored graphs (served with --confidence)"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        model_dir = resolve_model(args.model)
        written = export_onnx(
            model_dir, args.out, int8=args.int8, fp16=args.fp16, scored=args.scored
        )
    except EngineError as exc:
        print(f"error [{exc.code}]: {exc}", file=sys.stderr)
        return 2
    write_export_stamps(model_dir, written.values(), scored=args.scored)
    for precision, path in written.items():
        print(f"{precision}: {path} ({path.stat().st_size / 1e6:.1f} MB)")
    print(f"exported in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
