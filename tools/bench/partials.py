"""Partial-decode work of the fixed and adaptive cadences for 5, 15 and 30 s utterances.

It drives the real `streaming.Session` with a VAD that hears one continuous utterance,
answers each partial with a word every 300 ms (so a bounded partial window can settle
text and move on, as it does on speech), counts the partial requests and the audio they
carry, and (with `--model`) times how long the engine takes to decode them.

The command line is scripts/bench_partials.py.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.types import (
    SAMPLE_RATE,
    InferenceRequest,
    InferenceResult,
    RequestKind,
    Token,
    Transcript,
)
from streaming.commands import Audio
from streaming.partials.policy import PartialPolicy
from streaming.segmenter import SegmenterConfig
from streaming.session import Session, SessionConfig
from streaming.vad.types import BlockVerdict, VadConfig, VadEvent, VadEventKind, accept_each
from tools.bench.common.cli import add_json, parser_for
from tools.bench.common.output import write_json


class OneUtteranceVad:
    """Speech from the first sample until the stream ends."""

    def __init__(self) -> None:
        self._started = False

    def accept(self, samples: np.ndarray) -> list[VadEvent]:
        if self._started:
            return []
        self._started = True
        return [VadEvent(VadEventKind.SPEECH_START, 0)]

    def accept_blocks(self, blocks: Sequence[np.ndarray]) -> list[BlockVerdict]:
        return accept_each(self, blocks)

    def flush(self) -> list[VadEvent]:
        return []

    def pending_end(self) -> int | None:
        return None  # never a pause, so no early finals


class OneUtteranceVadModel:
    name = "one-utterance"

    def new_stream(self, config: VadConfig) -> OneUtteranceVad:
        return OneUtteranceVad()


WORD_MS = 300


def words(request: InferenceRequest) -> Transcript:
    """A word every 300 ms of the request's audio, timed on its clock."""
    duration_ms = request.num_samples * 1000 // SAMPLE_RATE
    tokens = tuple(
        Token(1, " w", start, start + 200) for start in range(50, duration_ms - 200, WORD_MS)
    )
    text = "".join(t.text for t in tokens).strip()
    return Transcript(text, "en", "neutral", "speech", True, text, tokens)


def partial_requests(policy: PartialPolicy, seconds: float) -> list[InferenceRequest]:
    """Stream `seconds` of audio in 100 ms frames and collect the partial requests."""
    config = SessionConfig(
        segmenter=SegmenterConfig(max_segment_ms=int(seconds * 1000) + 1000, preroll_ms=0),
        partials=policy,
    )
    session = Session("bench", config, OneUtteranceVadModel())
    frame = np.zeros(SAMPLE_RATE // 10, np.int16).tobytes()
    requests: list[InferenceRequest] = []
    for i in range(int(seconds * 10)):
        session.handle(Audio(frame), now=i / 10)
        for request in session.requests_to_submit():
            requests.append(request)
            session.receive_result(InferenceResult(request.ref, words(request)), now=i / 10)
    return [r for r in requests if r.kind is RequestKind.PARTIAL]


def measure(policy: PartialPolicy, seconds: float, decode: Any | None) -> dict[str, Any]:
    requests = partial_requests(policy, seconds)
    audio_s = sum(r.num_samples for r in requests) / SAMPLE_RATE
    ends = [r.start_sample + r.num_samples for r in requests]
    intervals = np.diff([0, *ends]) / SAMPLE_RATE
    row: dict[str, Any] = {
        "utterance_s": seconds,
        "partials": len(requests),
        "decoded_audio_s": round(audio_s, 2),
        "decoded_audio_per_speech_s": round(audio_s / seconds, 2),
        "max_interval_s": round(float(intervals.max()), 2) if len(intervals) else None,
        "longest_partial_s": max((r.num_samples for r in requests), default=0) / SAMPLE_RATE,
    }
    if decode is not None:
        started = time.perf_counter()
        for r in requests:
            decode(r)
        row["decode_s"] = round(time.perf_counter() - started, 3)
    return row


def make_decoder(args: argparse.Namespace) -> Any | None:
    if not args.model:
        return None
    from engine.backends.registry import BackendOptions, create_backend
    from engine.decoding.recognizer import Recognizer
    from engine.model.directory import resolve_model

    model_dir = resolve_model(args.model)
    options = BackendOptions(args.backend, args.precision, "cpu", args.threads)
    recognizer = Recognizer(model_dir, create_backend(model_dir, options))
    rng = np.random.default_rng(0)
    speech = (0.05 * rng.standard_normal(31 * SAMPLE_RATE)).astype(np.float32)

    def decode(request: InferenceRequest) -> None:
        # Same length as the request; the content does not change the cost.
        recognizer.decode([recognizer.prepare(speech[: request.num_samples], request.options)])

    return decode


def main(argv: Sequence[str] | None = None) -> int:
    parser = parser_for(__doc__)
    add_json(parser, required=True)
    parser.add_argument("--seconds", default="5,15,30")
    parser.add_argument("--model", default=None, help="also time the decodes with this model")
    parser.add_argument("--backend", default="onnx")
    parser.add_argument("--precision", default="int8")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    decode = make_decoder(args)
    policies = {
        "fixed_400ms": PartialPolicy(adaptive=False, hold_ms=0),
        "adaptive": PartialPolicy(hold_ms=0),
        "adaptive_hold_2s (default)": PartialPolicy(),
    }
    report: dict[str, Any] = {"policies": {}, "model": args.model}
    for name, policy in policies.items():
        rows = [measure(policy, float(s), decode) for s in args.seconds.split(",")]
        report["policies"][name] = {"config": repr(policy), "rows": rows}
        for row in rows:
            print(name, json.dumps(row), flush=True)
    write_json(args.json, report, indent=2)
    return 0
