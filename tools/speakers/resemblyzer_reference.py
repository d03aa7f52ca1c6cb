"""Write what Resemblyzer itself computes for closed-form signals, for engine.speakers' tests.

Needs the `resemblyzer` package with its own dependencies (librosa, webrtcvad), which the
project does not install; run it in a separate environment:

    python -m venv /tmp/rz && /tmp/rz/bin/pip install resemblyzer==0.1.4 webrtcvad-wheels
    PYTHONPATH=. /tmp/rz/bin/python -m tools.speakers.resemblyzer_reference \
        tests/engine/speakers/resemblyzer_reference.json

It records librosa's mel spectrogram of one signal, the package's window slicing for
several lengths, and its embeddings (volume raised to -30 dBFS as its preprocessing does;
its long-silence trimming left out, as a voice detector has already cut the speech).
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path

from tools.speakers.signals import SIGNALS, voiced

LENGTHS = (100, 16000, 25599, 25600, 40000, 59999, 160000)


def main(argv: list[str]) -> int:
    from resemblyzer import (  # type: ignore[import-untyped]  # its own venv: see above
        VoiceEncoder,
        normalize_volume,
        wav_to_mel_spectrogram,
    )

    encoder = VoiceEncoder(device="cpu", verbose=False)
    signals = {name: voiced(*spec) for name, spec in SIGNALS.items()}
    out = {
        "made_with": {p: version(p) for p in ("resemblyzer", "librosa", "torch", "numpy")},
        "mel_short": wav_to_mel_spectrogram(signals["short"]).tolist(),
        "window_starts": {
            str(n): [int(s.start) for s in encoder.compute_partial_slices(n, 1.3, 0.75)[1]]
            for n in LENGTHS
        },
        "embeddings": {
            name: encoder.embed_utterance(normalize_volume(wav, -30, increase_only=True)).tolist()
            for name, wav in signals.items()
        },
    }
    Path(argv[0]).write_text(json.dumps(out, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
