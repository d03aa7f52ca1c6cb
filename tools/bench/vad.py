"""VAD cost at many sessions: per-frame accept() latency and CPU per audio second per session.

N streams are fed 100 ms frames of real speech round-robin, the way one event loop would feed
N clients; each frame's accept() is timed, and so is each round over all N sessions.

The command line is scripts/bench_vad.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from streaming.vad.fsmn import FsmnVadModel
from streaming.vad.types import VadConfig, VadModel
from streaming.vad.webrtc import WebrtcVadModel
from tools.bench.common.cli import add_json, parser_for
from tools.bench.common.output import machine, write_json
from tools.bench.common.speech import stand_in_noise
from tools.bench.common.stats import percentiles
from tools.speech import missing_tools, speak

SR = 16_000
SENTENCES = (
    "Streaming speech recognition turns live audio into text while a person is still talking.",
    "Call centres record many conversations at once, and each must be kept apart.",
    "The final result arrives soon after the speaker stops, with language and emotion.",
)
DETECTORS: dict[str, Callable[[int], VadModel]] = {
    "fsmn": lambda threads: FsmnVadModel.from_package(threads=threads),
    "webrtc": lambda _threads: WebrtcVadModel(),
}


def speech_source() -> tuple[np.ndarray, str]:
    """espeak-ng sentences with 1.5 s pauses (speech and silence both cost), else noise."""
    if missing_tools():
        return stand_in_noise(20), "noise"
    pause = np.zeros(3 * SR // 2, np.float32)
    parts = [part for text in SENTENCES for part in (speak(text), pause)]
    return np.concatenate(parts), "espeak-ng"


def session_audio(source: np.ndarray, sessions: int, samples: int) -> list[np.ndarray]:
    """Each session starts at a different offset, so speech and silence are not in lockstep."""
    reps = int(np.ceil((samples + source.size) / source.size))
    looped = np.tile(source, reps)
    offsets = np.linspace(0, source.size, sessions, endpoint=False).astype(int)
    return [looped[offset : offset + samples] for offset in offsets]


def timings(values_ms: Sequence[float]) -> dict[str, float | None]:
    """Median, p99, max and mean of call times, to 0.1 µs."""
    p = percentiles(values_ms, digits=4)
    return {"p50_ms": p.p50, "p99_ms": p.p99, "max_ms": p.max, "mean_ms": p.mean}


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def bench_detector(
    name: str, audio: list[np.ndarray], frame: int, threads: int, end_silence_ms: int
) -> dict[str, Any]:
    """Feed every session one frame per round; time each accept() and each round."""
    began = time.perf_counter()
    model = DETECTORS[name](threads)
    load_s = time.perf_counter() - began
    rss_before = rss_bytes()
    streams = [model.new_stream(VadConfig(end_silence_ms=end_silence_ms)) for _ in audio]
    calls: list[float] = []
    rounds: list[float] = []
    events = 0
    cpu_began = time.process_time()
    for start in range(0, audio[0].size, frame):
        round_began = time.perf_counter_ns()
        for stream, samples in zip(streams, audio, strict=True):
            call_began = time.perf_counter_ns()
            events += len(stream.accept(samples[start : start + frame]))
            calls.append((time.perf_counter_ns() - call_began) / 1e6)
        rounds.append((time.perf_counter_ns() - round_began) / 1e6)
    flushes: list[float] = []
    for stream in streams:
        flush_began = time.perf_counter_ns()
        events += len(stream.flush())
        flushes.append((time.perf_counter_ns() - flush_began) / 1e6)
    cpu_s = time.process_time() - cpu_began
    audio_s = audio[0].size / SR
    return {
        "detector": name,
        "model_load_s": round(load_s, 3),
        "accept_per_frame": timings(calls),
        "round_over_all_sessions": timings(rounds),
        "flush": timings(flushes),
        "cpu_ms_per_audio_s_per_session": round(1000 * cpu_s / (audio_s * len(audio)), 4),
        "cpu_cores_at_real_time": round(cpu_s / audio_s, 4),
        "rss_growth_mib": round((rss_bytes() - rss_before) / 2**20, 2),
        "events": events,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = parser_for(__doc__)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--frame-ms", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    parser.add_argument("--end-silence-ms", type=int, default=500)
    parser.add_argument("--detectors", default="fsmn,webrtc")
    add_json(parser)
    args = parser.parse_args(argv)
    source, kind = speech_source()
    audio = session_audio(source, args.sessions, int(args.seconds * SR))
    frame = args.frame_ms * SR // 1000
    results = [
        bench_detector(name, audio, frame, args.threads, args.end_silence_ms)
        for name in args.detectors.split(",")
    ]
    report = {
        "sessions": args.sessions,
        "audio_s_per_session": args.seconds,
        "frame_ms": args.frame_ms,
        "threads": args.threads,
        "source": kind,
        "machine": machine("python", "cpu"),
        "results": results,
    }
    print(write_json(args.json, report, indent=2))
    return 0
