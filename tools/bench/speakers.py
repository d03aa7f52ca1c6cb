"""Who spoke (issue 50): the diarization error rate of files and of live streams, whether
the speaker count comes out right, and how many segments known speakers name right, on
synthetic conversations made at run time.

A conversation has 2 to 4 speakers, each a different synthetic voice (flite's slt, awb,
rms and kal16, and espeak-ng's en-us: five voices, no two renderings of one), taking 6 to
12 turns of one or two held-out demo sentences (cut to 1-8 s), the speaker changing at
each turn, with 0.2-1.0 s of quiet between turns (no overlap), on a -70 dBFS noise floor.
One real server (the demo model, `--commit pauses` so that a change of speaker at a pause
inside an utterance is seen) takes each conversation three ways:

- as a file, `diarized_json` (clustered at the end);
- as a v1 stream with `diarize: true`, at replay pace (labelled online, as live);
- as a file with `known_speaker_names[]`/`known_speaker_references[]`: a reference clip of
  other sentences in each speaker's voice, 3-6 s.

Scoring is pyannote.metrics' diarization error rate with a 0.25 s collar on each side of
every reference boundary (pyannote's `collar=0.5` is the collar's whole width), the
overlap-free reference being every turn's speech as made (each turn's audio trimmed of
its own silence). A named segment is right when its name is the speaker who spoke most of
it in the reference.

The command line is scripts/bench_speakers.py.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import random
import shlex
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile
from openai import OpenAI
from pyannote.core import Annotation, Segment
from pyannote.metrics.diarization import DiarizationErrorRate

from sensestream.client import Outcome, SessionOptions, converse, pcm16, split
from tools.bench.common.cli import add_json, add_server_args, parser_for
from tools.bench.common.output import machine, write_json
from tools.demo_model.texts import held_out
from tools.demo_model.voices import Voice, speak
from tools.spawn import ServerSpec, SpawnedServer, spawn
from tools.speech import SAMPLE_RATE, noise_floor, trim_silence

VOICES = (
    Voice("flite", "slt"),
    Voice("flite", "awb"),
    Voice("flite", "rms"),
    Voice("flite", "kal16"),
    Voice("espeak", "en-us"),
)
TURN_S = (1.0, 8.0)
GAP_S = (0.2, 1.0)
REFERENCE_S = (3.0, 6.0)
COLLAR_S = 0.25  # on each side of a reference boundary
BARS = {"file_der": 0.10, "live_der": 0.15, "count_right": 0.90, "named_right": 0.95}


@dataclass(frozen=True, slots=True)
class Turn:
    speaker: str  # the voice's name
    start: int  # samples
    end: int


@dataclass(frozen=True, slots=True)
class Conversation:
    audio: np.ndarray
    turns: tuple[Turn, ...]
    references: tuple[tuple[str, np.ndarray], ...]  # (speaker, a clip of other words)

    @property
    def speakers(self) -> set[str]:
        return {t.speaker for t in self.turns}

    def reference(self) -> Annotation:
        out = Annotation()
        for t in self.turns:
            out[Segment(t.start / SAMPLE_RATE, t.end / SAMPLE_RATE)] = t.speaker
        return out


def said(texts: Iterator[str], voice: Voice, low_s: float, high_s: float) -> np.ndarray:
    """Sentences in `voice`, one more while under `low_s`, cut at `high_s`."""
    parts: list[np.ndarray] = []
    while sum(p.size for p in parts) < low_s * SAMPLE_RATE:
        parts.append(trim_silence(speak(next(texts), voice)))
    return np.concatenate(parts)[: int(high_s * SAMPLE_RATE)]


def conversation(rng: random.Random, texts: Iterator[str]) -> Conversation:
    voices = rng.sample(VOICES, rng.randint(2, 4))
    audio: list[np.ndarray] = [np.zeros(SAMPLE_RATE // 2, np.float32)]
    at, turns, previous = SAMPLE_RATE // 2, [], None
    for k in range(rng.randint(6, 12)):
        voice = rng.choice([v for v in voices if v != previous] if k else voices)
        previous = voice
        speech = said(texts, voice, *TURN_S)
        turns.append(Turn(str(voice), at, at + speech.size))
        gap = np.zeros(int(rng.uniform(*GAP_S) * SAMPLE_RATE), np.float32)
        audio += [speech, gap]
        at += speech.size + gap.size
    audio.append(np.zeros(int(1.5 * SAMPLE_RATE), np.float32))
    joined = np.concatenate(audio)
    joined = (joined + noise_floor(joined.size, rng.randint(0, 2**16))).astype(np.float32)
    used = {t.speaker for t in turns}
    refs = tuple((str(v), said(texts, v, *REFERENCE_S)) for v in voices if str(v) in used)
    return Conversation(joined, tuple(turns), refs)


def conversations(count: int, seed: int) -> list[Conversation]:
    rng = random.Random(seed)
    texts = iter(s.spoken for s in held_out(seed, 40 * count))
    return [conversation(rng, texts) for _ in range(count)]


# ---- the three ways -------------------------------------------------------------------


def wav_bytes(audio: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, SAMPLE_RATE, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def data_url(audio: np.ndarray) -> str:
    return "data:audio/wav;base64," + base64.b64encode(wav_bytes(audio)).decode()


def from_file(server: SpawnedServer, conv: Conversation, known: bool) -> Annotation:
    """The file API's `diarized_json` segments, as an annotation."""
    client = OpenAI(api_key="unused", base_url=f"{server.http_url}/v1", max_retries=0)
    extra: dict[str, Any] = {}
    if known:
        extra["known_speaker_names"] = [name for name, _ in conv.references]
        extra["known_speaker_references"] = [data_url(a) for _, a in conv.references]
    done = client.audio.transcriptions.create(
        file=("conversation.wav", wav_bytes(conv.audio)),
        model="sensevoice",
        response_format="diarized_json",
        **extra,
    )
    out = Annotation()
    for s in done.segments:
        if s.end > s.start:
            out[Segment(s.start, s.end)] = s.speaker
    return out


def from_stream(server: SpawnedServer, conv: Conversation) -> Annotation:
    """A v1 stream's finals (their turns, or the final whole), labelled online."""
    start = {"type": "start", "diarize": True, "pace": "replay"}
    frames = split(pcm16(conv.audio), SAMPLE_RATE // 10 * 2)
    outcome: Outcome = asyncio.run(
        converse(server.url, frames, SessionOptions(start=start, drain_timeout_s=300))
    )
    out = Annotation()
    for final in outcome.of("final"):
        if not final.get("text") or "speaker" not in final:
            continue
        turns = final.get("speakers") or [final]
        for t in turns:
            if t["end_ms"] > t["start_ms"]:
                out[Segment(t["start_ms"] / 1000, t["end_ms"] / 1000)] = t["speaker"]
    return out


# ---- scoring --------------------------------------------------------------------------


def der(reference: Annotation, hypothesis: Annotation) -> float:
    metric = DiarizationErrorRate(collar=2 * COLLAR_S)
    return float(metric(reference, hypothesis, uem=reference.get_timeline().extent()))


def named_right(reference: Annotation, hypothesis: Annotation) -> tuple[int, int]:
    """(segments whose name is who spoke most of them, segments)."""
    right = total = 0
    for segment, _, name in hypothesis.itertracks(yield_label=True):
        spoke = reference.crop(segment).chart()
        if spoke:
            total += 1
            right += int(spoke[0][0] == name)
    return right, total


@dataclass(frozen=True, slots=True)
class Scored:
    file_der: float
    live_der: float
    count_file: int
    count_live: int
    speakers: int
    named: tuple[int, int]
    known_der: float


def score(server: SpawnedServer, conv: Conversation) -> Scored:
    reference = conv.reference()
    file_hyp, live_hyp = from_file(server, conv, False), from_stream(server, conv)
    known_hyp = from_file(server, conv, True)
    return Scored(
        der(reference, file_hyp),
        der(reference, live_hyp),
        len(file_hyp.labels()),
        len(live_hyp.labels()),
        len(conv.speakers),
        named_right(reference, known_hyp),
        der(reference, known_hyp),
    )


def summary(scored: Sequence[Scored], convs: Sequence[Conversation]) -> dict[str, Any]:
    n = len(scored)
    named = (sum(s.named[0] for s in scored), sum(s.named[1] for s in scored))
    speech_s = [sum(t.end - t.start for t in c.turns) / SAMPLE_RATE for c in convs]
    values = {
        # The mean of the conversations' rates.
        "file_der": statistics.fmean(s.file_der for s in scored),
        "live_der": statistics.fmean(s.live_der for s in scored),
        "count_right": sum(s.count_file == s.speakers for s in scored) / n,
        "count_right_live": sum(s.count_live == s.speakers for s in scored) / n,
        "named_right": named[0] / max(named[1], 1),
        "known_der": statistics.fmean(s.known_der for s in scored),
    }
    return {
        "conversations": n,
        "speakers": [s.speakers for s in scored],
        "speech_s_total": round(sum(speech_s), 1),
        "turns_total": sum(len(c.turns) for c in convs),
        "results": {k: round(v, 4) for k, v in values.items()},
        "per_conversation": [
            {
                "speakers": s.speakers,
                "file_der": round(s.file_der, 4),
                "live_der": round(s.live_der, 4),
                "found_file": s.count_file,
                "found_live": s.count_live,
                "named": list(s.named),
            }
            for s in scored
        ],
        "acceptance": {
            k: {"value": round(values[k], 4), "bar": bar, "pass": _passes(k, values[k], bar)}
            for k, bar in BARS.items()
        },
    }


def _passes(name: str, value: float, bar: float) -> bool:
    return value <= bar if name.endswith("der") else value >= bar


def parser() -> argparse.ArgumentParser:
    p = parser_for(__doc__)
    p.add_argument("--model", type=Path, default=Path("models/demo"))
    p.add_argument("--conversations", type=int, default=20)
    p.add_argument("--seed", type=int, default=50)
    add_server_args(p)
    add_json(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    convs = conversations(args.conversations, args.seed)
    options = ("--model", str(args.model), "--commit", "pauses", "--log-level", "warning")
    server = spawn(ServerSpec((*options, *shlex.split(args.server_args))))
    try:
        scored = []
        for k, conv in enumerate(convs):
            scored.append(score(server, conv))
            print(f"conversation {k}: {scored[-1]}", flush=True)
    finally:
        server.stop()
    document = {
        "benchmark": "speakers: diarization of files and live streams, known speakers",
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "voices": [str(v) for v in VOICES],
        **summary(scored, convs),
        "machine": machine("cpus", "platform", "cpu", "python"),
    }
    print(write_json(args.json, document))
    return 0
