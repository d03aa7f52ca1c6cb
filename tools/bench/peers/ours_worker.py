"""One scenario through our engine (ONNX, as the server runs it): `python -m
tools.bench.peers.ours_worker --model DIR ...`; `--precision` as the server's."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from tools.bench.peers import scenarios


def main(argv: Sequence[str] | None = None) -> int:
    args = scenarios.worker_args(argv)
    from engine.backends.registry import BackendOptions, create_backend
    from engine.decoding.recognizer import Recognizer
    from engine.model.directory import resolve_model
    from engine.types import DecodeOptions, Transcript

    started = time.perf_counter()
    model_dir = resolve_model(args.model)
    options = BackendOptions("onnx", args.precision, "cpu", args.threads)
    recognizer = Recognizer(model_dir, create_backend(model_dir, options))
    load_s = time.perf_counter() - started
    decode_options = DecodeOptions(language="auto", itn=True)

    def decode(clips: list[np.ndarray]) -> list[str]:
        results = recognizer.transcribe(clips, decode_options, batch_size=len(clips))
        return [r.text if isinstance(r, Transcript) else f"<error {r}>" for r in results]

    clips = scenarios.load_clips(args.clips)
    scenarios.report(scenarios.run(decode, clips, args.scenario), load_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
