"""What the partial hold costs and what it buys: decoded audio against caption revisions.

A live session (the real FSMN VAD, 100 ms frames, every request answered at once by a
model that knows the words: the demo model on espeak-ng speech of its own sentences) is
run once per `hold_ms`. Per setting it reports the audio its partials decoded per second
of speech, and how far each partial's words were from the final's words over the same
span: the share of partial words a caption later had to change.

The command line is scripts/bench_partial_hold.py.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from engine.backends.registry import BackendOptions, create_backend
from engine.decoding.recognizer import Recognizer
from engine.model.directory import resolve_model
from engine.types import SAMPLE_RATE, InferenceRequest, InferenceResult, RequestKind, Transcript
from streaming.audio.decoder import AudioFormat
from streaming.commands import Audio, Configure, StreamOptions
from streaming.events import Final, Partial
from streaming.partials.policy import PartialPolicy
from streaming.session import Session, SessionConfig
from streaming.vad.fsmn import FsmnVadModel
from tools.bench.common.cli import add_json, parser_for
from tools.bench.common.output import write_json
from tools.demo_model.texts import held_out
from tools.speech import speak


def edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Word-level Levenshtein distance (rapidfuzz, which jiwer is built on, compares any
    sequences of hashables; jiwer itself refuses an empty reference)."""
    from rapidfuzz.distance import Levenshtein

    return int(Levenshtein.distance(a, b))


def final_words_until(final: Transcript, end_ms: int) -> list[str]:
    """The final's words whose tokens end by `end_ms` (its clock starts at the utterance)."""
    text = "".join(t.text for t in final.tokens if t.end_ms <= end_ms)
    return text.split()


def run_session(
    recognizer: Recognizer, vad: FsmnVadModel, audio: np.ndarray, policy: PartialPolicy
) -> tuple[list[Partial], list[Final], float]:
    """Stream `audio` live; return the partials, finals and audio seconds partials decoded."""
    session = Session("hold", replace(SessionConfig(), partials=policy), vad)
    pcm16 = AudioFormat("pcm_s16le", SAMPLE_RATE, 1)
    session.handle(Configure(pcm16, StreamOptions(itn=False)), 0.0)
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
    frame = SAMPLE_RATE // 10 * 2
    partial_s = 0.0
    events: list[Any] = []
    for i in range(0, len(pcm), frame):
        now = i / (2 * SAMPLE_RATE)
        session.handle(Audio(pcm[i : i + frame]), now)
        partial_s += answer(recognizer, session, now)
        events += session.events_to_send()
    session.end_of_stream(len(pcm) / (2 * SAMPLE_RATE))
    partial_s += answer(recognizer, session, 0.0)
    events += session.events_to_send()
    partials = [e for e in events if isinstance(e, Partial)]
    return partials, [e for e in events if isinstance(e, Final)], partial_s


def answer(recognizer: Recognizer, session: Session, now: float) -> float:
    partial_s = 0.0
    for request in session.requests_to_submit():
        if request.kind is RequestKind.PARTIAL:
            partial_s += request.num_samples / SAMPLE_RATE
        session.receive_result(InferenceResult(request.ref, decode(recognizer, request)), now)
    return partial_s


def decode(recognizer: Recognizer, request: InferenceRequest) -> Transcript:
    return recognizer.decode([recognizer.prepare(request.audio, request.options)])[0]


def revisions(partials: Sequence[Partial], finals: Sequence[Final]) -> tuple[int, int]:
    """(word edits from each partial to the final over its span, words shown)."""
    by_utt = {f.utt_id: f for f in finals}
    edits = shown = 0
    for p in partials:
        final = by_utt.get(p.utt_id)
        if final is None:
            continue
        words = p.text.split()
        span_ms = p.end_ms - final.start_ms
        edits += edit_distance(words, final_words_until(final.transcript, span_ms))
        shown += len(words)
    return edits, shown


def speech_clips(count: int, per_clip: int, seed: int) -> list[np.ndarray]:
    """Long utterances: `per_clip` held-out demo sentences spoken in one breath each."""
    sentences = held_out(seed, count * per_clip)
    rng = random.Random(seed)
    rng.shuffle(sentences)
    gap = np.zeros(SAMPLE_RATE, np.float32)
    clips = []
    for k in range(count):
        text = " ".join(s.written for s in sentences[k * per_clip : (k + 1) * per_clip])
        clips.append(np.concatenate([gap, speak(text), gap]))
    return clips


def main(argv: Sequence[str] | None = None) -> int:
    parser = parser_for(__doc__)
    parser.add_argument("--model", default="models/demo")
    parser.add_argument("--holds", default="0,2000,1500,1000,700")
    parser.add_argument("--clips", type=int, default=8)
    parser.add_argument("--sentences-per-clip", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    add_json(parser, required=True)
    args = parser.parse_args(argv)
    model_dir = resolve_model(args.model)
    recognizer = Recognizer(model_dir, create_backend(model_dir, BackendOptions("onnx", "fp32")))
    vad = FsmnVadModel.from_package()
    clips = speech_clips(args.clips, args.sentences_per_clip, args.seed)
    speech_s = sum(c.size for c in clips) / SAMPLE_RATE - 2 * len(clips)
    rows = []
    for hold in (int(h) for h in args.holds.split(",")):
        policy = PartialPolicy(hold_ms=hold)
        edits = shown = partial_count = 0
        decoded = 0.0
        for clip in clips:
            partials, finals, partial_s = run_session(recognizer, vad, clip, policy)
            e, s = revisions(partials, finals)
            edits, shown, decoded = edits + e, shown + s, decoded + partial_s
            partial_count += len(partials)
        rows.append(
            {
                "hold_ms": hold,
                "partials": partial_count,
                "partial_audio_per_speech_s": round(decoded / speech_s, 3),
                "words_shown": shown,
                "word_edits_to_final": edits,
                "revision_rate": round(edits / max(shown, 1), 4),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    report = {"model": args.model, "speech_s": round(speech_s, 1), "rows": rows}
    write_json(args.json, report, indent=1)
    return 0
