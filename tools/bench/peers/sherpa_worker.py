"""One scenario through sherpa-onnx, in its side environment: `python -m
tools.bench.peers.sherpa_worker --model model.int8.onnx --tokens tokens.txt ...`."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from tools.bench.peers import scenarios


def main(argv: Sequence[str] | None = None) -> int:
    args = scenarios.worker_args(argv)
    import sherpa_onnx

    started = time.perf_counter()
    # As sherpa's own servers decode: ITN on, language auto.
    recognizer = sherpa_onnx.OfflineRecognizer.from_sense_voice(
        model=args.model, tokens=args.tokens, num_threads=args.threads, use_itn=True
    )
    load_s = time.perf_counter() - started

    def decode(clips: list[np.ndarray]) -> list[str]:
        streams = []
        for clip in clips:
            stream = recognizer.create_stream()
            stream.accept_waveform(scenarios.SAMPLE_RATE, clip)
            streams.append(stream)
        recognizer.decode_streams(streams)
        return [s.result.text for s in streams]

    clips = scenarios.load_clips(args.clips)
    scenarios.report(scenarios.run(decode, clips, args.scenario), load_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
