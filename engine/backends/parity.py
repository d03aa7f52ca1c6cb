"""Parity of one backend against a reference: `python -m engine.backends.parity --model DIR ...`.

The same features go to both (e.g. torch fp16 on CUDA against torch fp32 on the CPU);
the report gives per-clip frame-argmax agreement and whether the collapsed CTC tokens
match, alone and in one batch, and, for a candidate that computes features on its device,
from the raw audio too. Clips are synthetic, so no speech tools are needed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.backends.base import AudioBackend, Backend
from engine.backends.registry import (
    BACKENDS,
    PRECISIONS,
    SWITCHES,
    BackendOptions,
    create_backend,
)
from engine.decoding.ctc import greedy_collapse
from engine.errors import EngineError
from engine.features.fbank import Frontend
from engine.model.directory import resolve_model
from engine.serving.builder import speech_like
from engine.types import SAMPLE_RATE, DecodeOptions


@dataclass(frozen=True, slots=True)
class ClipParity:
    """How one clip's outputs compare."""

    seconds: float
    kind: str
    frame_agreement: float
    tokens_equal: bool
    batched_frame_agreement: float
    # From raw audio through the candidate's own (device) features; None when it has none.
    audio_frame_agreement: float | None = None

    def to_dict(self) -> dict[str, Any]:
        audio = self.audio_frame_agreement
        return {
            "seconds": self.seconds,
            "kind": self.kind,
            "frame_agreement": round(self.frame_agreement, 4),
            "tokens_equal": self.tokens_equal,
            "batched_frame_agreement": round(self.batched_frame_agreement, 4),
            "audio_frame_agreement": None if audio is None else round(audio, 4),
        }


def voice_like(seconds: float, seed: int = 0) -> np.ndarray:
    """A gliding harmonic tone under a syllable-rate envelope: voiced, speech-shaped audio."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    f0 = 120 + 40 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6))
    phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
    harmonics = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = np.clip(np.sin(2 * np.pi * 4 * t + rng.uniform(0, 6)), 0, None) ** 2
    audio = 0.2 * envelope * harmonics + 0.005 * rng.standard_normal(t.size)
    return audio.astype(np.float32)


def clips(seconds: Sequence[float]) -> list[tuple[str, float, np.ndarray]]:
    """Each length twice: voice-like and noise."""
    out = []
    for i, s in enumerate(seconds):
        out.append(("voice", s, voice_like(s, i)))
        out.append(("noise", s, speech_like(s, i)))
    return out


def compare(
    reference: Backend,
    candidate: Backend,
    feats: Sequence[np.ndarray],
    labels: Sequence[tuple[str, float]],
    audios: Sequence[np.ndarray] = (),
) -> list[ClipParity]:
    """Clip by clip against the reference, alone and as one batch (and from `audios`, the
    clips the features came from, where the candidate computes features itself)."""
    options = [DecodeOptions()] * len(feats)
    ref = [reference.run([f], [o])[0] for f, o in zip(feats, options, strict=True)]
    alone = [candidate.run([f], [o])[0] for f, o in zip(feats, options, strict=True)]
    batched = candidate.run(feats, options)
    from_audio: list[float | None] = [None] * len(feats)
    if audios and isinstance(candidate, AudioBackend) and candidate.takes_audio:
        heard = [candidate.run_audio([a], [o])[0] for a, o in zip(audios, options, strict=True)]
        from_audio = [_agreement(r, h) for r, h in zip(ref, heard, strict=True)]
    return [
        ClipParity(
            seconds=seconds,
            kind=kind,
            frame_agreement=_agreement(r, a),
            tokens_equal=greedy_collapse(r).ids == greedy_collapse(a).ids,
            batched_frame_agreement=_agreement(r, b),
            audio_frame_agreement=h,
        )
        for (kind, seconds), r, a, b, h in zip(labels, ref, alone, batched, from_audio, strict=True)
    ]


def _agreement(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return 0.0
    return float((a == b).mean()) if a.size else 1.0


def summarise(results: Sequence[ClipParity]) -> dict[str, Any]:
    frames = [r.frame_agreement for r in results]
    heard = [r.audio_frame_agreement for r in results if r.audio_frame_agreement is not None]
    return {
        "audio_frame_agreement_mean": round(float(np.mean(heard)), 4) if heard else None,
        "frame_agreement_mean": round(float(np.mean(frames)), 4),
        "frame_agreement_min": round(float(np.min(frames)), 4),
        "tokens_equal": f"{sum(r.tokens_equal for r in results)}/{len(results)}",
        "batched_frame_agreement_mean": round(
            float(np.mean([r.batched_frame_agreement for r in results])), 4
        ),
        "clips": [r.to_dict() for r in results],
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine.backends.parity", description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--backend", choices=BACKENDS, default="torch")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp16")
    parser.add_argument("--ref-backend", choices=BACKENDS, default="torch")
    parser.add_argument("--ref-device", default="cpu")
    parser.add_argument("--ref-precision", choices=PRECISIONS, default="fp32")
    parser.add_argument("--device-features", choices=SWITCHES, default="auto")
    parser.add_argument("--cuda-graphs", choices=SWITCHES, default="auto")
    parser.add_argument("--seconds", default="2,5,10", help="clip lengths, comma-separated")
    parser.add_argument("--json", type=Path, help="write the report here too")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Print (and write) the parity report; 2 when a backend cannot be built."""
    args = build_parser().parse_args(argv)
    try:
        model_dir = resolve_model(args.model)
        ref_options = BackendOptions(args.ref_backend, args.ref_precision, args.ref_device)
        options = BackendOptions(
            args.backend,
            args.precision,
            args.device,
            device_features=args.device_features,
            cuda_graphs=args.cuda_graphs,
        )
        reference = create_backend(model_dir, ref_options)
        candidate = create_backend(model_dir, options)
    except (EngineError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    frontend = Frontend.from_model_dir(model_dir.path)
    made = clips([float(s) for s in args.seconds.split(",") if s])
    feats = [frontend.features(audio) for _, _, audio in made]
    started = time.perf_counter()
    labels = [(k, s) for k, s, _ in made]
    results = compare(reference, candidate, feats, labels, [a for _, _, a in made])
    report = {
        "model": str(model_dir.path),
        "test_model": model_dir.is_test_model,
        "reference": reference.name,
        "candidate": candidate.name,
        "seconds": round(time.perf_counter() - started, 2),
        **summarise(results),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
