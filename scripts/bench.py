"""Live-stream capacity: how many real-time streams one server holds, and latency at that load.

N simulated clients stream real espeak-ng speech (utterances of 2-12 s separated by silence)
at real-time pace in 100 ms pcm_s16le frames. Per final: latency from the moment the
utterance's last speech sample was sent to the final's arrival, also shown with the VAD's
end-silence subtracted. Per utterance: first-partial latency and the gaps between partials.
Per run: errors, dropped sessions, and the server's batch sizes, queue delay, CPU, RSS and
GPU memory from /stats and /metrics. `--find-capacity` searches for the largest N that meets
the latency criteria; `--spawn-server` runs the whole comparison (as configured and at
`--max-batch 1`) in one command.

Examples:
    python scripts/bench.py --url ws://127.0.0.1:8765/ws --streams 1,4,16 --duration 60
    python scripts/bench.py --spawn-server models/test-full --server-args "--precision int8" \
        --find-capacity --duration 60 --json benchmarks/capacity.json --plot capacity.png
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import queue
import random
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosedError, WebSocketException

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RATE = 16000
FRAME_MS = 100
FRAME_SAMPLES = SAMPLE_RATE * FRAME_MS // 1000
START_MESSAGE = json.dumps(
    {"type": "start", "sample_rate": SAMPLE_RATE, "encoding": "pcm_s16le", "language": "auto"}
)
STOP_MESSAGE = json.dumps({"type": "stop"})
MIN_UTTERANCE_S, MAX_UTTERANCE_S = 2.0, 12.0

# Single sentences (commas only: a sentence break could outlast the VAD's end-silence and
# split an utterance), about 2-12 s each at espeak-ng's speed 160.
SENTENCES: tuple[tuple[str, str], ...] = (
    ("en-us", "Good morning, how can I help you today?"),
    ("en-us", "Thank you for calling, please hold the line."),
    ("en-us", "The quick brown fox jumps over the lazy dog."),
    ("en-gb", "Could you tell me the opening hours of the library on Saturday?"),
    ("cmn", "今天天气很好，我们去公园散步吧。"),
    ("en-gb", "Numbers like one hundred and twenty three should be written as digits."),
    ("en-us", "Please call me back when you get this message, it is about the meeting tomorrow."),
    ("cmn", "欢迎使用实时语音识别服务，这是一个测试句子，用来检查系统是否正常工作。"),
    (
        "en-us",
        "We measured the latency of every final result while many clients were streaming "
        "audio at the same time, and the numbers stayed low.",
    ),
    (
        "en-us",
        "Streaming speech recognition turns live audio into text while the person is still "
        "talking, and a final result arrives soon after they stop speaking.",
    ),
    (
        "en-gb",
        "I would like to change the delivery address for my order, because I will be away "
        "from home for the next two weeks and nobody can sign for the parcel at the door.",
    ),
    (
        "en-us",
        "The train to the airport leaves every fifteen minutes from platform four, and the "
        "journey takes about half an hour if there are no delays on the line, so please "
        "leave a little early.",
    ),
)


# ---- configuration and results -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Criteria:
    """What a run must meet to count towards capacity."""

    max_final_latency_ms: float = 1000.0  # p95, end-silence subtracted
    max_partial_interval_ms: float = 2000.0  # p95
    max_errors: int = 0


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Load shape and measurement settings shared by every run."""

    duration_s: float = 60.0
    speech_ratio: float = 0.5
    partial_interval_ms: int = 400
    end_silence_ms: int = 500
    ramp_s: float = 2.0
    drain_timeout_s: float = 120.0
    stats_interval_s: float = 2.0
    settle_timeout_s: float = 60.0
    seed: int = 0
    criteria: Criteria = field(default_factory=Criteria)


@dataclass(frozen=True, slots=True)
class Clip:
    """One pool utterance: shared pre-encoded frames and the speech length in samples."""

    voice: str
    text: str
    frames: tuple[bytes, ...]
    samples: int

    @property
    def seconds(self) -> float:
        return self.samples / SAMPLE_RATE


@dataclass(frozen=True, slots=True)
class Utterance:
    """Speech a stream sends: frame indices and its span on the stream clock."""

    first_frame: int
    last_frame: int
    start_ms: float
    end_ms: float


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """Everything one client sends, decided before the run."""

    start_delay_s: float
    frames: tuple[bytes, ...]
    utterances: tuple[Utterance, ...]


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Summary of one latency sample (milliseconds unless named otherwise)."""

    count: int
    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None


@dataclass(frozen=True, slots=True)
class Latency:
    """The per-run latency picture."""

    final_ms: Percentiles
    final_minus_end_silence_ms: Percentiles  # the configured end-silence subtracted
    vad_end_silence_ms: Percentiles  # measured: the server's decided_ms minus speech end
    final_after_vad_ms: Percentiles  # engine and transport: from sending decided_ms's audio
    first_partial_ms: Percentiles
    partial_interval_ms: Percentiles


@dataclass(frozen=True, slots=True)
class ClientCost:
    """What the benchmark client itself spent."""

    cpu_s: float
    cpu_percent: float
    cpu_ms_per_stream_second: float
    send_lag_ms: Percentiles
    event_loop: str


@dataclass(frozen=True, slots=True)
class ServerLoad:
    """Server readings over one run (from /stats samples and /metrics deltas)."""

    batch_size_mean: float | None
    batch_size_distribution: dict[str, int] | None
    batches: int | None
    queue_delay_ms: Percentiles | None
    cpu_percent_mean: float | None
    cpu_percent_max: float | None
    rss_bytes_max: int | None
    gpu_memory_used_bytes_max: int | None
    torch_cuda_reserved_bytes_max: int | None
    partials_dropped: int | None
    stats_samples: int
    decoded_audio_s: dict[str, float] | None = None  # per request kind
    # Seconds the device spent on batches, and audio seconds decoded per busy second: the
    # engine's speed under this load, to hold against its speed alone (the batch curve).
    engine_busy_s: float | None = None
    busy_audio_s_per_s: float | None = None


@dataclass(frozen=True, slots=True)
class RunResult:
    """One load level against one server."""

    streams: int
    duration_s: float
    wall_s: float
    speech_ratio_actual: float
    utterances: int
    finals: int
    partials: int
    matched_utterances: int
    missed_utterances: int
    extra_finals: int
    unmatched_finals: int
    utterances_without_partials: int
    errors: int
    error_samples: tuple[str, ...]
    dropped_sessions: int
    latency: Latency
    client: ClientCost
    server: ServerLoad
    passed: bool
    failed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TargetReport:
    """All runs against one server, and its capacity when searched."""

    name: str
    url: str
    command: tuple[str, ...] | None
    engine: dict[str, Any] | None
    end_silence_ms: int
    end_silence_source: str
    runs: tuple[RunResult, ...]
    capacity: int | None
    capacity_at_limit: bool  # the search stopped at --max-streams: capacity is at least this
    largest_passing_streams: int


# ---- speech pool ---------------------------------------------------------------------------


def synthesize(text: str, voice: str, out_dir: Path) -> Path:
    """espeak-ng into a 16 kHz mono 16-bit wav via sox, cached by content hash."""
    key = hashlib.sha1(f"{voice}|160|{SAMPLE_RATE}|{text}".encode()).hexdigest()[:16]
    out = out_dir / f"{key}.wav"
    if out.exists():
        return out
    raw = out_dir / f"{key}.raw.wav"
    subprocess.run(
        ["espeak-ng", "-v", voice, "-s", "160", "-w", str(raw), text],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        ["sox", str(raw), "-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", str(out)],
        check=True,
        capture_output=True,
    )
    raw.unlink()
    return out


def trim_silence(audio: np.ndarray, threshold_dbfs: float = -45.0) -> np.ndarray:
    """Cut leading and trailing 10 ms frames quieter than `threshold_dbfs`."""
    frames = audio[: audio.size // 160 * 160].reshape(-1, 160).astype(np.float64)
    level = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    loud = np.flatnonzero(level > threshold_dbfs)
    if loud.size == 0:
        return audio[:0]
    return audio[loud[0] * 160 : (loud[-1] + 1) * 160]


def pcm16(audio: np.ndarray) -> bytes:
    """float32 in [-1, 1] to little-endian int16 bytes."""
    return bytes((np.clip(audio, -1.0, 32767 / 32768) * 32768).astype("<i2").tobytes())


def to_frames(audio: np.ndarray) -> tuple[bytes, ...]:
    """100 ms pcm_s16le frames, the last one padded with zeros."""
    padded = np.zeros(math.ceil(audio.size / FRAME_SAMPLES) * FRAME_SAMPLES, np.float32)
    padded[: audio.size] = audio
    data = pcm16(padded)
    step = FRAME_SAMPLES * 2
    return tuple(data[i : i + step] for i in range(0, len(data), step))


def build_pool(cache_dir: Path) -> list[Clip]:
    """Synthesize (once, cached) and pre-encode every sentence of 2-12 s of speech."""
    missing = [t for t in ("espeak-ng", "sox") if shutil.which(t) is None]
    if missing:
        raise RuntimeError(f"missing {', '.join(missing)}: apt-get install espeak-ng sox")
    cache_dir.mkdir(parents=True, exist_ok=True)
    pool = []
    for voice, text in SENTENCES:
        audio, rate = sf.read(str(synthesize(text, voice, cache_dir)), dtype="float32")
        if rate != SAMPLE_RATE:
            raise RuntimeError(f"sox produced {rate} Hz, expected {SAMPLE_RATE}")
        speech = trim_silence(np.asarray(audio, np.float32))
        if MIN_UTTERANCE_S <= speech.size / SAMPLE_RATE <= MAX_UTTERANCE_S:
            pool.append(Clip(voice, text, to_frames(speech), int(speech.size)))
    if not pool:
        raise RuntimeError("no espeak-ng sentence came out between 2 and 12 s")
    return pool


def silence_frames(rng: np.random.Generator, count: int = 8) -> tuple[bytes, ...]:
    """A few distinct 100 ms frames of -70 dBFS noise, shared by every stream."""
    scale = 10 ** (-70 / 20) * math.sqrt(2)
    return tuple(
        pcm16((rng.standard_normal(FRAME_SAMPLES) * scale).astype(np.float32)) for _ in range(count)
    )


# ---- load plan -----------------------------------------------------------------------------


def plan_stream(
    rng: random.Random,
    pool: Sequence[Clip],
    silence: Sequence[bytes],
    config: BenchConfig,
    start_delay_s: float,
) -> StreamPlan:
    """Silence, then utterances with gaps chosen so speech is `speech_ratio` of the time."""
    total = int(config.duration_s * 1000 / FRAME_MS)
    ratio = config.speech_ratio
    tail = math.ceil((config.end_silence_ms + 1000) / FRAME_MS)  # the VAD closes the last one
    min_gap = math.ceil((config.end_silence_ms + 500) / FRAME_MS)
    shortest = min(len(c.frames) for c in pool)
    mean_cycle = sum(len(c.frames) for c in pool) / len(pool) / ratio
    first_max = max(2, min(int(mean_cycle), total - tail - shortest))
    position = rng.randint(2, first_max)
    frames: list[bytes] = [silence[i % len(silence)] for i in range(position)]
    utterances: list[Utterance] = []
    while True:
        fits = [c for c in pool if position + len(c.frames) + tail <= total]
        if not fits:
            break
        clip = rng.choice(fits)
        utterances.append(
            Utterance(
                first_frame=position,
                last_frame=position + len(clip.frames) - 1,
                start_ms=position * FRAME_MS,
                end_ms=position * FRAME_MS + clip.samples * 1000 / SAMPLE_RATE,
            )
        )
        frames.extend(clip.frames)
        gap = max(min_gap, round(len(clip.frames) * (1 - ratio) / ratio * rng.uniform(0.5, 1.5)))
        frames.extend(silence[(position + i) % len(silence)] for i in range(gap))
        position += len(clip.frames) + gap
    frames.extend(silence[i % len(silence)] for i in range(max(0, total - len(frames))))
    return StreamPlan(start_delay_s, tuple(frames[:total]), tuple(utterances))


def plan_streams(count: int, pool: Sequence[Clip], config: BenchConfig) -> list[StreamPlan]:
    """Independent plans (stream i's is the same at every N), starts spread over the ramp."""
    rng = random.Random(config.seed)
    silence = silence_frames(np.random.default_rng(config.seed))
    ramp = min(config.ramp_s, config.duration_s / 4)
    return [plan_stream(rng, pool, silence, config, ramp * i / count) for i in range(count)]


# ---- the clients ---------------------------------------------------------------------------


@dataclass
class StreamLog:
    """What one client saw (filled in during the run)."""

    t0: float = 0.0
    sent_at: list[float] = field(default_factory=list)
    partials: list[tuple[int, float]] = field(default_factory=list)
    # (utt_id, start_ms, end_ms, arrival, decided_ms or None from an older server)
    finals: list[tuple[int, float, float, float, float | None]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    ended: bool = False


async def send_frames(ws: ClientConnection, plan: StreamPlan, log: StreamLog) -> None:
    """Send the pre-encoded frames at real-time pace, noting when each one went out."""
    clock = time.monotonic
    log.t0 = t0 = clock()
    step = FRAME_MS / 1000
    for i, frame in enumerate(plan.frames):
        delay = t0 + i * step - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        await ws.send(frame)
        log.sent_at.append(clock())


async def receive_events(ws: ClientConnection, log: StreamLog) -> None:
    """Record partial and final arrivals, errors and `end` until the socket closes."""
    clock = time.monotonic
    try:
        async for message in ws:
            now = clock()
            event = json.loads(message)
            kind = event.get("type")
            if kind == "partial":
                log.partials.append((event["utt_id"], now))
            elif kind == "final":
                span = (event["utt_id"], event["start_ms"], event["end_ms"])
                log.finals.append((*span, now, event.get("decided_ms")))
            elif kind == "error":
                log.errors.append(f"{event.get('code')}: {event.get('message')}")
            elif kind == "end":
                log.ended = True
    except ConnectionClosedError as exc:
        log.errors.append(f"connection closed: {exc}")


async def run_stream(
    endpoint: Endpoint, plan: StreamPlan, log: StreamLog, drain_timeout_s: float
) -> None:
    """One live client: connect, start, stream, stop, wait for every owed final and `end`."""
    await asyncio.sleep(plan.start_delay_s)
    try:
        async with connect(
            endpoint.ws_url,
            additional_headers=endpoint.headers,
            compression=None,
            max_size=1 << 22,
            ping_interval=None,
            open_timeout=60,
        ) as ws:
            await ws.send(START_MESSAGE)
            receiver = asyncio.create_task(receive_events(ws, log))
            try:
                await send_frames(ws, plan, log)
                await ws.send(STOP_MESSAGE)
                await asyncio.wait_for(asyncio.shield(receiver), drain_timeout_s)
            finally:
                receiver.cancel()
    except (OSError, TimeoutError, WebSocketException) as exc:
        log.errors.append(f"{type(exc).__name__}: {exc}")
    if not log.ended and not log.errors:
        log.errors.append("session closed without `end`")


# ---- server probes -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Histogram:
    """A Prometheus histogram: cumulative bucket counts by upper bound."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    total: float
    count: float

    def minus(self, before: Histogram | None) -> Histogram:
        if before is None or before.bounds != self.bounds:
            return self
        cumulative = tuple(a - b for a, b in zip(self.cumulative, before.cumulative, strict=True))
        return Histogram(
            self.bounds, cumulative, self.total - before.total, self.count - before.count
        )

    def quantile(self, q: float) -> float | None:
        """Linear interpolation inside the bucket, as Prometheus's histogram_quantile does."""
        if self.count <= 0:
            return None
        rank, lower, below = q * self.count, 0.0, 0.0
        for bound, cum in zip(self.bounds, self.cumulative, strict=True):
            if cum >= rank:
                if math.isinf(bound):
                    return lower
                inside = cum - below
                return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
            lower, below = bound, cum
        return lower


def http_base(ws_url: str) -> str:
    """http(s)://host:port for a ws(s)://host:port/ws URL."""
    match = re.match(r"^ws(s?)://([^/]+)", ws_url)
    if match is None:
        raise ValueError(f"not a ws:// URL: {ws_url}")
    return f"http{match.group(1)}://{match.group(2)}"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a server takes streams and answers /stats and /metrics, and the key it wants."""

    ws_url: str
    http_url: str
    api_key: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, ws_url: str, http_url: str | None, api_key: str | None) -> Endpoint:
        """HTTP on the WebSocket's own host and port unless told otherwise."""
        return cls(ws_url, (http_url or http_base(ws_url)).rstrip("/"), api_key)

    @property
    def headers(self) -> dict[str, str]:
        """The Authorization header, when there is a key."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def http_get(endpoint: Endpoint, path: str, timeout: float = 10.0) -> str | None:
    """The body of a GET, or None when the server does not answer."""
    request = urllib.request.Request(endpoint.http_url + path, headers=endpoint.headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body: bytes = response.read()
            return body.decode()
    except (OSError, urllib.error.URLError, ValueError):
        return None


def get_stats(endpoint: Endpoint) -> dict[str, Any] | None:
    """The server's /stats JSON, or None."""
    body = http_get(endpoint, "/stats")
    if body is None:
        return None
    try:
        stats: dict[str, Any] = json.loads(body)
    except json.JSONDecodeError:
        return None
    return stats


def get_histograms(endpoint: Endpoint) -> dict[str, Histogram]:
    """Every unlabelled histogram in /metrics, by family name (empty when unavailable)."""
    body = http_get(endpoint, "/metrics")
    found: dict[str, Histogram] = {}
    if body is None:
        return found
    for family in text_string_to_metric_families(body):
        if family.type != "histogram":
            continue
        buckets: dict[float, float] = {}
        total = count = 0.0
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                buckets[float(sample.labels["le"])] = sample.value
            elif sample.name.endswith("_sum"):
                total = sample.value
            elif sample.name.endswith("_count"):
                count = sample.value
        bounds = tuple(sorted(buckets))
        found[family.name] = Histogram(bounds, tuple(buckets[b] for b in bounds), total, count)
    return found


def stats_end_silence(stats: dict[str, Any] | None) -> int | None:
    """The server's end-silence when /stats exposes one (top level or one level down)."""
    if not stats:
        return None
    for scope in (stats, *(v for v in stats.values() if isinstance(v, dict))):
        value = scope.get("end_silence_ms")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    return None


def counter_value(stats: dict[str, Any] | None, name: str) -> float | None:
    """A counter from /stats' queue section (partials dropped), when present."""
    value = ((stats or {}).get("queue") or {}).get(name)
    return float(value) if isinstance(value, int | float) else None


def decoded_by_kind(
    before: dict[str, Any] | None, after: dict[str, Any] | None
) -> dict[str, float] | None:
    """Audio seconds the server decoded per request kind during the run, from /stats."""
    first = ((before or {}).get("batches") or {}).get("audio_s_by_kind")
    last = ((after or {}).get("batches") or {}).get("audio_s_by_kind")
    if not isinstance(first, dict) or not isinstance(last, dict):
        return None
    return {kind: round(float(v) - float(first.get(kind, 0.0)), 1) for kind, v in last.items()}


async def sample_stats(
    endpoint: Endpoint, interval_s: float, samples: list[dict[str, Any]]
) -> None:
    """Poll /stats while the load runs (each reading's cpu_percent covers the last interval)."""
    while True:
        await asyncio.sleep(interval_s)
        stats = await asyncio.to_thread(get_stats, endpoint)
        if stats is not None:
            samples.append(stats)


def wait_idle(endpoint: Endpoint, timeout_s: float) -> None:
    """Let the previous run's sessions and queue drain before the next one starts."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = get_stats(endpoint)
        if stats is None or (
            stats.get("sessions", 0) == 0 and (stats.get("queue") or {}).get("depth", 0) == 0
        ):
            return
        time.sleep(0.5)


# ---- analysis ------------------------------------------------------------------------------


def percentiles(values: Sequence[float]) -> Percentiles:
    """count, mean, p50/p95/p99 and max, rounded to 0.1."""
    if not values:
        return Percentiles(0)
    arr = np.asarray(values, dtype=np.float64)
    p50, p95, p99 = (round(float(v), 1) for v in np.percentile(arr, [50, 95, 99]))
    return Percentiles(
        len(arr), round(float(arr.mean()), 1), p50, p95, p99, round(float(arr.max()), 1)
    )


FinalSeen = tuple[int, float, float, float, float | None]


def match_finals(
    utterances: Sequence[Utterance], finals: Sequence[FinalSeen]
) -> tuple[dict[int, list[FinalSeen]], int]:
    """Give each final to the utterance its span overlaps most; also count the unmatched."""
    matched: dict[int, list[FinalSeen]] = {}
    unmatched = 0
    for final in finals:
        _, start, end, *_ = final
        best, best_overlap = -1, 0.0
        for index, utt in enumerate(utterances):
            overlap = min(end, utt.end_ms) - max(start, utt.start_ms)
            if overlap > best_overlap:
                best, best_overlap = index, overlap
        if best < 0:
            unmatched += 1
        else:
            matched.setdefault(best, []).append(final)
    return matched, unmatched


@dataclass
class Samples:
    """Latency samples gathered over every stream of a run (milliseconds)."""

    final: list[float] = field(default_factory=list)
    vad_end_silence: list[float] = field(default_factory=list)
    after_vad: list[float] = field(default_factory=list)
    first_partial: list[float] = field(default_factory=list)
    partial_gaps: list[float] = field(default_factory=list)
    send_lag: list[float] = field(default_factory=list)
    matched: int = 0
    extra: int = 0
    unmatched: int = 0
    without_partials: int = 0


def collect_stream(plan: StreamPlan, log: StreamLog, into: Samples) -> None:
    """Add one stream's latencies: finals by time span, partials through the final's utt_id."""
    sent = log.sent_at
    step = FRAME_MS / 1000
    into.send_lag.extend((t - (log.t0 + i * step)) * 1000 for i, t in enumerate(sent))
    partials: dict[int, list[float]] = {}
    for utt_id, arrival in log.partials:
        partials.setdefault(utt_id, []).append(arrival)
    for arrivals in partials.values():
        into.partial_gaps.extend(np.diff(arrivals) * 1000)
    matched, into_unmatched = match_finals(plan.utterances, log.finals)
    into.unmatched += into_unmatched
    for index, finals in matched.items():
        utt = plan.utterances[index]
        into.matched += 1
        into.extra += len(finals) - 1
        closing = max(finals, key=lambda f: f[2])
        if utt.last_frame < len(sent):
            into.final.append((closing[3] - sent[utt.last_frame]) * 1000)
        add_vad_split(utt, closing, sent, into)
        firsts = [partials[f[0]][0] for f in finals if f[0] in partials]
        if not firsts:
            into.without_partials += 1
        elif utt.first_frame < len(sent):
            into.first_partial.append((min(firsts) - sent[utt.first_frame]) * 1000)


def add_vad_split(utt: Utterance, final: FinalSeen, sent: Sequence[float], into: Samples) -> None:
    """Split a final's latency at the server's decision point (`decided_ms`), if it gave one."""
    decided = final[4]
    if decided is None:
        return
    # The audio up to decided_ms was complete once the frame ending there had been sent.
    frame = max(0, math.ceil(decided / FRAME_MS) - 1)
    if frame < len(sent):
        into.vad_end_silence.append(decided - utt.end_ms)
        into.after_vad.append((final[3] - sent[frame]) * 1000)


def judged_final_latency(latency: Latency) -> Percentiles:
    """The final latency the criterion uses: after the measured VAD decision when known,
    else with the configured end-silence subtracted (a server without `decided_ms`)."""
    if latency.final_after_vad_ms.count:
        return latency.final_after_vad_ms
    return latency.final_minus_end_silence_ms


def server_load(
    before: dict[str, Histogram],
    after: dict[str, Histogram],
    samples: Sequence[dict[str, Any]],
    partials_dropped: int | None,
    decoded_audio_s: dict[str, float] | None = None,
) -> ServerLoad:
    """Batch sizes and queue delay from /metrics deltas; CPU and memory from /stats samples."""
    batch = histogram_delta(before, after, "engine_batch_size")
    delay = histogram_delta(before, after, "engine_queue_delay_seconds")
    busy = histogram_delta(before, after, "engine_inference_seconds")
    busy_s = round(busy.total, 1) if busy else None
    audio_s = sum(decoded_audio_s.values()) if decoded_audio_s else None
    procs = [s.get("process") or {} for s in samples]
    cpu = [float(p["cpu_percent"]) for p in procs if "cpu_percent" in p]
    rss = [int(p["rss_bytes"]) for p in procs if "rss_bytes" in p]
    gpu = [sum(int(g.get("memory_used", 0)) for g in p.get("gpus") or []) for p in procs]
    torch_mem = [int((p.get("torch_cuda") or {}).get("reserved", 0)) for p in procs]
    return ServerLoad(
        batch_size_mean=round(batch.total / batch.count, 2) if batch and batch.count else None,
        batch_size_distribution=batch_distribution(batch) if batch else None,
        batches=int(batch.count) if batch else None,
        queue_delay_ms=histogram_percentiles(delay) if delay else None,
        cpu_percent_mean=round(sum(cpu) / len(cpu), 1) if cpu else None,
        cpu_percent_max=round(max(cpu), 1) if cpu else None,
        rss_bytes_max=max(rss, default=0) or None,
        gpu_memory_used_bytes_max=max(gpu, default=0) or None,
        torch_cuda_reserved_bytes_max=max(torch_mem, default=0) or None,
        partials_dropped=partials_dropped,
        stats_samples=len(samples),
        decoded_audio_s=decoded_audio_s,
        engine_busy_s=busy_s,
        busy_audio_s_per_s=round(audio_s / busy_s, 2) if audio_s and busy_s else None,
    )


def increase(before: float | None, after: float | None) -> int | None:
    """How much a counter grew (None when either reading is missing)."""
    if before is None or after is None:
        return None
    return int(after - before)


def histogram_delta(
    before: dict[str, Histogram], after: dict[str, Histogram], name: str
) -> Histogram | None:
    """What a histogram gained over the run (None when the server does not export it)."""
    if name not in after:
        return None
    return after[name].minus(before.get(name))


def batch_distribution(hist: Histogram) -> dict[str, int]:
    """Batches per bucket of the batch-size histogram, keyed '1', '2', '5-6', '>64'."""
    out: dict[str, int] = {}
    previous_bound, previous_cum = 0.0, 0.0
    for bound, cum in zip(hist.bounds, hist.cumulative, strict=True):
        if math.isinf(bound):
            key = f">{int(previous_bound)}"
        elif bound - previous_bound > 1:
            key = f"{int(previous_bound) + 1}-{int(bound)}"
        else:
            key = str(int(bound))
        if cum - previous_cum > 0:
            out[key] = int(cum - previous_cum)
        previous_bound, previous_cum = bound, cum
    return out


def histogram_percentiles(hist: Histogram) -> Percentiles:
    """Bucket-estimated percentiles of a seconds histogram, in milliseconds."""
    if hist.count <= 0:
        return Percentiles(0)

    def ms(q: float) -> float | None:
        value = hist.quantile(q)
        return None if value is None else round(value * 1000, 1)

    mean = round(hist.total / hist.count * 1000, 1)
    return Percentiles(int(hist.count), mean, ms(0.5), ms(0.95), ms(0.99), None)


def judge(latency: Latency, errors: int, dropped: int, criteria: Criteria) -> tuple[str, ...]:
    """The criteria a run missed (empty: it passed)."""
    failed = []
    final_p95 = judged_final_latency(latency).p95
    if final_p95 is None:
        failed.append("no final latency measured")
    elif final_p95 > criteria.max_final_latency_ms:
        failed.append(f"final latency p95 {final_p95} ms > {criteria.max_final_latency_ms}")
    gap_p95 = latency.partial_interval_ms.p95
    if gap_p95 is not None and gap_p95 > criteria.max_partial_interval_ms:
        failed.append(f"partial interval p95 {gap_p95} ms > {criteria.max_partial_interval_ms}")
    if errors + dropped > criteria.max_errors:
        failed.append(f"{errors} error(s), {dropped} dropped session(s)")
    return tuple(failed)


# ---- one run -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadOutcome:
    """Raw material of one run, before analysis."""

    logs: tuple[StreamLog, ...]
    wall_s: float
    cpu_s: float
    stats_samples: tuple[dict[str, Any], ...]


async def drive(
    endpoint: Endpoint, plans: Sequence[StreamPlan], config: BenchConfig
) -> LoadOutcome:
    """Run every client on this event loop while polling /stats."""
    logs = [StreamLog() for _ in plans]
    samples: list[dict[str, Any]] = []
    sampler = asyncio.create_task(sample_stats(endpoint, config.stats_interval_s, samples))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    await asyncio.gather(
        *(
            run_stream(endpoint, p, log, config.drain_timeout_s)
            for p, log in zip(plans, logs, strict=True)
        )
    )
    wall = time.monotonic() - started
    done = resource.getrusage(resource.RUSAGE_SELF)
    sampler.cancel()
    cpu = (done.ru_utime + done.ru_stime) - (usage.ru_utime + usage.ru_stime)
    return LoadOutcome(tuple(logs), wall, cpu, tuple(samples))


def run_loop(coro: Coroutine[Any, Any, LoadOutcome]) -> tuple[LoadOutcome, str]:
    """Run on uvloop when it is installed, else asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro), "asyncio"
    return uvloop.run(coro), "uvloop"


def run_once(
    endpoint: Endpoint, streams: int, pool: Sequence[Clip], config: BenchConfig
) -> RunResult:
    """N live streams against the server for `duration_s`, analysed."""
    end_silence_ms = config.end_silence_ms
    plans = plan_streams(streams, pool, config)
    wait_idle(endpoint, config.settle_timeout_s)
    hist_before = get_histograms(endpoint)
    stats_before = get_stats(endpoint)  # also resets cpu_percent
    outcome, loop_name = run_loop(drive(endpoint, plans, config))
    hist_after = get_histograms(endpoint)
    stats_after = get_stats(endpoint)
    collected = Samples()
    for plan, log in zip(plans, outcome.logs, strict=True):
        collect_stream(plan, log, collected)
    errors = [e for log in outcome.logs for e in log.errors]
    dropped = sum(1 for log in outcome.logs if not log.ended)
    latency = Latency(
        final_ms=percentiles(collected.final),
        final_minus_end_silence_ms=percentiles([v - end_silence_ms for v in collected.final]),
        vad_end_silence_ms=percentiles(collected.vad_end_silence),
        final_after_vad_ms=percentiles(collected.after_vad),
        first_partial_ms=percentiles(collected.first_partial),
        partial_interval_ms=percentiles(collected.partial_gaps),
    )
    stream_seconds = streams * config.duration_s
    client = ClientCost(
        cpu_s=round(outcome.cpu_s, 3),
        cpu_percent=round(100 * outcome.cpu_s / outcome.wall_s, 1),
        cpu_ms_per_stream_second=round(1000 * outcome.cpu_s / stream_seconds, 3),
        send_lag_ms=percentiles(collected.send_lag),
        event_loop=loop_name,
    )
    utterances = sum(len(p.utterances) for p in plans)
    speech_s = sum(u.end_ms - u.start_ms for p in plans for u in p.utterances) / 1000
    failed = judge(latency, len(errors), dropped, config.criteria)
    return RunResult(
        streams=streams,
        duration_s=config.duration_s,
        wall_s=round(outcome.wall_s, 2),
        speech_ratio_actual=round(speech_s / stream_seconds, 3),
        utterances=utterances,
        finals=sum(len(log.finals) for log in outcome.logs),
        partials=sum(len(log.partials) for log in outcome.logs),
        matched_utterances=collected.matched,
        missed_utterances=utterances - collected.matched,
        extra_finals=collected.extra,
        unmatched_finals=collected.unmatched,
        utterances_without_partials=collected.without_partials,
        errors=len(errors),
        error_samples=tuple(sorted(set(errors))[:10]),
        dropped_sessions=dropped,
        latency=latency,
        client=client,
        server=server_load(
            hist_before,
            hist_after,
            outcome.stats_samples,
            increase(
                counter_value(stats_before, "partials_dropped"),
                counter_value(stats_after, "partials_dropped"),
            ),
            decoded_by_kind(stats_before, stats_after),
        ),
        passed=not failed,
        failed=failed,
    )


# ---- capacity search -----------------------------------------------------------------------


def capacity_search(start: int, limit: int) -> Generator[int, bool, int]:
    """Double N from `start` until a run fails, then bisect.

    Yields each N to try and is sent whether it passed; returns the largest passing N
    (0: none). A generator, so that two servers' searches can take turns.
    """
    lo, hi, n = 0, None, max(1, min(start, limit))
    while hi is None:
        if (yield n):
            lo = n
            if n >= limit:
                break
            n = min(n * 2, limit)
        else:
            hi = n
    while hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        if (yield mid):
            lo = mid
        else:
            hi = mid
    return lo


def find_capacity(passes: Callable[[int], bool], start: int, limit: int) -> int:
    """The largest N that `passes`, by `capacity_search`."""
    return interleave_searches([passes], start, limit)[0]


def interleave_searches(
    passes: Sequence[Callable[[int], bool]], start: int, limit: int
) -> list[int]:
    """Each server's capacity search, one run of each in turn.

    This shared machine's speed drifts by up to 1.7x within minutes (the engine's own
    busy-time readings show it), so searching one server and then the other compares
    two different machines; taking turns exposes both to the same drift.
    """
    searches = [capacity_search(start, limit) for _ in passes]
    trying = {i: next(search) for i, search in enumerate(searches)}
    found = [0] * len(passes)
    while trying:
        for i in sorted(trying):
            try:
                trying[i] = searches[i].send(passes[i](trying[i]))
            except StopIteration as stop:
                found[i] = stop.value
                del trying[i]
    return found


# ---- spawned servers -----------------------------------------------------------------------


class SpawnedServer:
    """`python -m server --port 0 ...` in a subprocess, its output drained by a thread."""

    def __init__(self, args: Sequence[str], timeout_s: float) -> None:
        self.args = tuple(args)
        self.tail: deque[str] = deque(maxlen=200)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.proc = subprocess.Popen(
            self.args,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        threading.Thread(target=self._pump, daemon=True).start()
        found = self._wait_for(r"listening on ws://([\w.:-]+):(\d+)/ws", timeout_s)
        host = found.group(1)
        self.url = f"ws://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{found.group(2)}/ws"
        self._wait_for(r"ready in", timeout_s)

    def _pump(self) -> None:
        for line in self.proc.stdout or ():
            self.tail.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def _wait_for(self, pattern: str, timeout_s: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None or time.monotonic() > deadline:
                self.stop()
                log = "".join(self.tail)
                raise RuntimeError(f"server never printed {pattern!r}; its output:\n{log}")
            match = re.search(pattern, line)
            if match:
                return match

    def stop(self) -> None:
        """SIGTERM (graceful drain), then SIGKILL after 60 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def option_value(args: Sequence[str], flag: str) -> str | None:
    """The last value given for `flag` (as `--flag V` or `--flag=V`) in an argument list."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def server_command(
    model: str, server_args: Sequence[str], config: BenchConfig, max_streams: int
) -> list[str]:
    """The spawned server's command line; `server_args` come last, so they win.

    Every benchmark client comes from 127.0.0.1, so the session caps are lifted to the
    largest N the benchmark will try.
    """
    return [
        sys.executable,
        "-m",
        "server",
        "--model",
        model,
        "--port",
        "0",
        "--end-silence-ms",
        str(config.end_silence_ms),
        "--partial-interval-ms",
        str(config.partial_interval_ms),
        "--max-sessions",
        str(max_streams),
        "--max-sessions-per-ip",
        str(max_streams),
        *server_args,
    ]


# ---- one server, all load levels -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """A server to measure: a URL, or a command to spawn."""

    name: str
    url: str | None = None
    command: tuple[str, ...] | None = None
    http_url: str | None = None  # /stats and /metrics, when not on the WebSocket's port


class LiveTarget:
    """A server being measured: spawned if asked, its runs by stream count."""

    def __init__(
        self,
        target: Target,
        pool: Sequence[Clip],
        config: BenchConfig,
        args: argparse.Namespace,
    ) -> None:
        self.target = target
        self.pool = pool
        self.results: dict[int, RunResult] = {}
        self.spawned = None
        if target.command is not None:
            print(f"[{target.name}] starting: {shlex.join(target.command)}", file=sys.stderr)
            self.spawned = SpawnedServer(target.command, args.server_timeout_s)
        self.url = self.spawned.url if self.spawned is not None else target.url or ""
        self.endpoint = Endpoint.of(self.url, target.http_url, args.api_key)
        self.stats = get_stats(self.endpoint)
        if self.stats is None:
            print(f"[{target.name}] no /stats at {self.endpoint.http_url}", file=sys.stderr)
        self.end_silence, self.source = resolve_end_silence(self.stats, target, config)
        self.config = replace(config, end_silence_ms=self.end_silence)

    def passes(self, n: int) -> bool:
        if n not in self.results:
            name, seconds = self.target.name, self.config.duration_s
            print(f"[{name}] {n} stream(s) for {seconds:g} s", file=sys.stderr)
            self.results[n] = run_once(self.endpoint, n, self.pool, self.config)
            print_run(self.results[n])
        return self.results[n].passed

    def close(self) -> None:
        if self.spawned is not None:
            self.spawned.stop()

    def report(self, capacity: int | None, max_streams: int) -> TargetReport:
        runs = [self.results[k] for k in sorted(self.results)]
        passing = [r.streams for r in runs if r.passed]
        return TargetReport(
            name=self.target.name,
            url=self.url,
            command=self.target.command,
            engine=(self.stats or {}).get("engine"),
            end_silence_ms=self.end_silence,
            end_silence_source=self.source,
            runs=tuple(runs),
            capacity=capacity,
            capacity_at_limit=capacity is not None and capacity >= max_streams,
            largest_passing_streams=max(passing, default=0),
        )


def measure_targets(
    targets: Sequence[Target],
    streams: Sequence[int],
    pool: Sequence[Clip],
    config: BenchConfig,
    args: argparse.Namespace,
) -> list[TargetReport]:
    """Start every server (one after another, so their start-up tuning does not overlap),
    then run the stream counts or the capacity searches, the servers taking turns."""
    live: list[LiveTarget] = []
    try:
        for target in targets:
            live.append(LiveTarget(target, pool, config, args))
        checks = [t.passes for t in live]
        capacities: list[int | None] = [None] * len(live)
        if args.find_capacity:
            capacities = list(interleave_searches(checks, min(streams), args.max_streams))
        else:
            for n in streams:
                for check in checks:
                    check(n)
    finally:
        for t in live:
            t.close()
    return [t.report(c, args.max_streams) for t, c in zip(live, capacities, strict=True)]


def resolve_end_silence(
    stats: dict[str, Any] | None, target: Target, config: BenchConfig
) -> tuple[int, str]:
    """End-silence to subtract: /stats if it says, else the spawn command, else the flag."""
    exposed = stats_end_silence(stats)
    if exposed is not None:
        return exposed, "stats"
    if target.command is not None:
        value = option_value(target.command, "--end-silence-ms")
        if value is not None:
            return int(value), "server command line"
    return config.end_silence_ms, "--end-silence-ms"


# ---- output --------------------------------------------------------------------------------


def print_run(run: RunResult) -> None:
    """One summary line per run on stderr."""
    lat = run.latency
    judged = judged_final_latency(lat)
    verdict = "pass" if run.passed else "FAIL: " + "; ".join(run.failed)
    if any("server_full" in e for e in run.error_samples):
        verdict += " (server_full: raise the server's --max-sessions / --max-sessions-per-ip)"
    print(
        f"  N={run.streams:<4} finals={run.finals:<5} "
        f"final after VAD p50/p95/p99={judged.p50}/{judged.p95}/{judged.p99} ms  "
        f"VAD end-silence p50={lat.vad_end_silence_ms.p50} ms  "
        f"partial gap p95={lat.partial_interval_ms.p95} ms  errors={run.errors} "
        f"dropped={run.dropped_sessions}  server cpu={run.server.cpu_percent_mean}%  "
        f"client cpu={run.client.cpu_percent}%  -> {verdict}",
        file=sys.stderr,
    )


def plot(reports: Sequence[TargetReport], criteria: Criteria, out: Path) -> None:
    """Latency percentiles against streams: the first server solid, the baseline dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for index, report in enumerate(reports):
        runs = sorted(report.runs, key=lambda r: r.streams)
        xs = [r.streams for r in runs]
        style: dict[str, Any] = {"linestyle": ("-", "--", ":", "-.")[index % 4]}
        if index:
            style["markerfacecolor"] = "none"
        name = report.name + (f" (capacity {report.capacity})" if report.capacity else "")
        for key, color in (("p50", "tab:blue"), ("p95", "tab:orange"), ("p99", "tab:red")):
            ys = [getattr(judged_final_latency(r.latency), key) for r in runs]
            left.plot(xs, ys, color=color, marker="o", label=f"{name} {key}", **style)
        gaps = [r.latency.partial_interval_ms.p95 for r in runs]
        first = [r.latency.first_partial_ms.p95 for r in runs]
        right.plot(xs, gaps, color="tab:green", marker="o", label=f"{name} gap p95", **style)
        right.plot(xs, first, color="tab:purple", marker="s", label=f"{name} first p95", **style)
    left.axhline(criteria.max_final_latency_ms, color="grey", linewidth=0.8)
    right.axhline(criteria.max_partial_interval_ms, color="grey", linewidth=0.8)
    left.set(xlabel="live streams", ylabel="ms", title="final latency after the VAD's end-silence")
    right.set(xlabel="live streams", ylabel="ms", title="partial interval and first partial")
    for ax in (left, right):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def build_report(
    reports: Sequence[TargetReport], config: BenchConfig, pool: Sequence[Clip]
) -> dict[str, Any]:
    """The JSON document: settings, pool, every server's runs, capacity ratio."""
    by_name = {r.name: r for r in reports}
    ratio = None
    configured, baseline = by_name.get("configured"), by_name.get("baseline")
    if configured is not None and baseline is not None:
        key = "capacity" if configured.capacity is not None else "largest_passing_streams"
        top, bottom = getattr(configured, key), getattr(baseline, key)
        ratio = round(top / bottom, 2) if bottom else None
    seconds = [c.seconds for c in pool]
    return {
        "config": asdict(config),
        "host": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "note": "cpu_percent: 100 = one core; gpu memory: device-wide NVML reading",
        },
        "pool": {
            "utterances": len(pool),
            "seconds_min": round(min(seconds), 2),
            "seconds_mean": round(sum(seconds) / len(seconds), 2),
            "seconds_max": round(max(seconds), 2),
        },
        "servers": {r.name: asdict(r) for r in reports},
        "capacity_ratio": ratio,
    }


# ---- command line --------------------------------------------------------------------------


def parse_streams(text: str) -> list[int]:
    """'1,4,16' to [1, 4, 16]."""
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("--streams takes positive integers, e.g. 1,4,16")
    return values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a running server's ws://HOST:PORT/ws")
    where.add_argument("--spawn-server", metavar="MODEL_DIR", help="start the servers here")
    parser.add_argument("--baseline-url", help="a second server (e.g. --max-batch 1) to compare")
    parser.add_argument("--server-args", default="", help="extra `python -m server` options")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("SENSESTREAM_BENCH_API_KEY"),
        help="sent as a Bearer token on /ws, /stats and /metrics (env SENSESTREAM_BENCH_API_KEY)",
    )
    parser.add_argument("--stats-url", help="http://HOST:PORT of /stats when on another port")
    parser.add_argument("--baseline-stats-url", help="the same for --baseline-url")
    parser.add_argument("--no-baseline", action="store_true", help="spawn only the configured one")
    parser.add_argument(
        "--streams", type=parse_streams, default=[1], help="N[,N2,...]; the search starts at min"
    )
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per stream")
    parser.add_argument("--speech-ratio", type=float, default=0.5, help="share of time speaking")
    parser.add_argument(
        "--partial-interval-ms", type=int, default=400, help="passed to spawned servers"
    )
    parser.add_argument(
        "--end-silence-ms",
        type=int,
        default=500,
        help="the server's VAD end-silence, subtracted from final latency (passed when spawning)",
    )
    parser.add_argument(
        "--find-capacity", action="store_true", help="search for the largest N meeting the criteria"
    )
    parser.add_argument("--max-streams", type=int, default=1024, help="capacity search limit")
    parser.add_argument(
        "--max-final-latency-ms", type=float, default=1000.0, help="p95, end-silence subtracted"
    )
    parser.add_argument("--max-partial-interval-ms", type=float, default=2000.0, help="p95")
    parser.add_argument("--ramp-s", type=float, default=2.0, help="spread of connection starts")
    parser.add_argument(
        "--drain-timeout-s", type=float, default=120.0, help="wait for `end` after `stop`"
    )
    parser.add_argument(
        "--server-timeout-s", type=float, default=900.0, help="spawned server start-up limit"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--speech-dir", type=Path, default=default_speech_dir())
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--plot", type=Path, help="write a PNG plot here (needs matplotlib)")
    args = parser.parse_args(argv)
    if not 0.05 <= args.speech_ratio <= 0.95:
        parser.error("--speech-ratio must be within 0.05..0.95")
    if args.duration < 4:
        parser.error("--duration must be at least 4 s (one utterance and the VAD's tail)")
    if (args.baseline_url or args.stats_url or args.baseline_stats_url) and not args.url:
        parser.error("--baseline-url, --stats-url and --baseline-stats-url go with --url")
    return args


def default_speech_dir() -> Path:
    """Where synthesized sentences are cached between runs."""
    root = Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")))
    return root / "sensestream" / "bench-speech"


def make_targets(args: argparse.Namespace, config: BenchConfig) -> list[Target]:
    """The configured server and its baseline, by URL or as commands to spawn."""
    if args.url:
        targets = [Target("configured", url=args.url, http_url=args.stats_url)]
        if args.baseline_url:
            targets.append(
                Target("baseline", url=args.baseline_url, http_url=args.baseline_stats_url)
            )
        return targets
    largest = max(*args.streams, args.max_streams if args.find_capacity else 1)
    server_args = shlex.split(args.server_args)
    command = server_command(args.spawn_server, server_args, config, largest)
    targets = [Target("configured", command=tuple(command))]
    if not args.no_baseline:
        targets.append(Target("baseline", command=(*command, "--max-batch", "1")))
    return targets


def raise_fd_limit() -> None:
    """One socket per stream: lift the soft open-files limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 when it completed (whatever the verdicts), 2 on a setup failure."""
    args = parse_args(argv)
    if args.plot is not None:
        import matplotlib  # noqa: F401  (fail before the runs, not after)
    config = BenchConfig(
        duration_s=args.duration,
        speech_ratio=args.speech_ratio,
        partial_interval_ms=args.partial_interval_ms,
        end_silence_ms=args.end_silence_ms,
        ramp_s=args.ramp_s,
        drain_timeout_s=args.drain_timeout_s,
        seed=args.seed,
        criteria=Criteria(args.max_final_latency_ms, args.max_partial_interval_ms),
    )
    raise_fd_limit()
    try:
        pool = build_pool(args.speech_dir)
        reports = measure_targets(make_targets(args, config), args.streams, pool, config, args)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = build_report(reports, config, pool)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    if args.plot is not None:
        plot(reports, config.criteria, args.plot)
    for r in reports:
        print(f"{r.name}: capacity={r.capacity} largest passing N={r.largest_passing_streams}")
    print(f"capacity ratio: {report['capacity_ratio']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
