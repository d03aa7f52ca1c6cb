"""A declared-cost fake engine process, so that a benchmark measures only the front end.

`python -m tools.bench.capacity.fake_engine --socket PATH --cost-ms-per-audio-s X
--fixed-ms Y` serves an `EngineReplica` on a Unix socket exactly as
`python -m server.engines.process` does (same socket, same ready line
`SenseStream engine listening on unix:PATH`; servers attach with
`python -m server --engine unix:PATH`), but its engine decodes nothing: each request is
answered `Y + X * audio seconds` milliseconds after it arrives, by a timer on the event
loop, with a fixed transcript ("hello world", English, neutral, speech, one timed token
per word). No model, no batches, no queue: requests never wait for one another (an engine
of unbounded capacity), and it uses no CPU beyond reading the socket. Its report names
itself (`backend` is `FAKE_BACKEND`), so /stats and the benchmark JSON say what answered.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import signal
import socket
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.client import EngineSnapshot, open_channel
from engine.remote.replica import EngineReplica
from engine.remote.unix import serve_replica
from engine.serving.builder import DeviceReport, EngineReport
from engine.types import (
    SAMPLE_RATE,
    InferenceRequest,
    InferenceResult,
    RequestKind,
    Token,
    Transcript,
)

#: The `backend` of the fake's report (and /stats' `engine.backend`): how a reader tells it.
FAKE_BACKEND = "declared-cost-fake"
#: What the benchmark JSON says of an arm whose engine is this.
FAKE_LABEL = "declared-cost fake backend, uses no CPU"
READY_LINE = "SenseStream engine listening on unix:"
WORDS = ("hello", "world")
#: Seconds a stopping fake gives the answers still due.
CLOSE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class DeclaredCost:
    """How long an answer takes: a fixed part and a part per second of audio."""

    fixed_ms: float = 0.0
    ms_per_audio_s: float = 0.0

    def __post_init__(self) -> None:
        if self.fixed_ms < 0 or self.ms_per_audio_s < 0:
            raise ValueError("a declared cost cannot be negative")

    def delay_s(self, num_samples: int) -> float:
        return (self.fixed_ms + self.ms_per_audio_s * num_samples / SAMPLE_RATE) / 1000

    def describe(self) -> str:
        return f"{self.fixed_ms:g} ms + {self.ms_per_audio_s:g} ms per audio s"


def fake_transcript(num_samples: int, itn: bool) -> Transcript:
    """The fixed answer, its words spread evenly over the audio (for the partial window)."""
    duration_ms = num_samples * 1000 // SAMPLE_RATE
    step = duration_ms // len(WORDS)
    tokens = tuple(
        Token(i, " " + word, i * step, duration_ms if i == len(WORDS) - 1 else (i + 1) * step)
        for i, word in enumerate(WORDS)
    )
    text = " ".join(WORDS)
    return Transcript(text, "en", "neutral", "speech", itn, text, tokens)


def fake_report(cost: DeclaredCost) -> EngineReport:
    """What the fake says of itself in its hello: no model, its cost, its label."""
    return EngineReport(
        model=f"{FAKE_LABEL}: {cost.describe()}",
        test_model=False,
        backend=FAKE_BACKEND,
        load_s=0.0,
        warmup_s=0.0,
        max_batch=1,
        batch_curve=(),
        memory_budget=0,
        cost_scale=1.0,
        devices=(DeviceReport("fake", FAKE_BACKEND, 0, None),),
        feature_threads=0,
    )


class DeclaredCostEngine:
    """An `EngineClient` answering each request after its declared cost, by loop timers."""

    def __init__(self, cost: DeclaredCost) -> None:
        self.cost = cost
        self._channels: dict[str, asyncio.Queue[InferenceResult]] = {}
        self._timers: dict[str, dict[int, asyncio.TimerHandle]] = {}
        self._ids = itertools.count()
        self._answered = 0
        self._samples = {kind.value: 0 for kind in RequestKind}
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False

    def start(self) -> None:
        """Nothing to start: timers run on the caller's loop."""

    async def close(self, timeout: float | None = None) -> None:
        """Let the answers still due arrive (within `timeout`), then drop the rest."""
        self._closed = True
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            for session_id in list(self._timers):
                self.cancel(session_id)

    @property
    def healthy(self) -> bool:
        return not self._closed

    @property
    def pending(self) -> int:
        return sum(len(timers) for timers in self._timers.values())

    def open_session(
        self, session_id: str, results: asyncio.Queue[InferenceResult] | None = None
    ) -> asyncio.Queue[InferenceResult]:
        return open_channel(self._channels, session_id, results)

    def submit(self, request: InferenceRequest) -> None:
        if self._closed:
            raise RuntimeError("the engine is closed")
        if request.session_id not in self._channels:
            raise ValueError(f"session {request.session_id!r} is not open")
        key = next(self._ids)
        delay = self.cost.delay_s(request.num_samples)
        handle = asyncio.get_running_loop().call_later(delay, self._deliver, request, key)
        self._timers.setdefault(request.session_id, {})[key] = handle
        self._idle.clear()

    def cancel(self, session_id: str) -> int:
        """Forget a session: its answers still due are never sent."""
        self._channels.pop(session_id, None)
        timers = self._timers.pop(session_id, {})
        for handle in timers.values():
            handle.cancel()
        self._note_idle()
        return len(timers)

    def snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(
            queued=self.pending,
            partials_dropped=0,
            batches=self._answered,
            max_batch=1,
            mean_padding_efficiency=1.0,
            oom_splits=0,
            audio_s_by_kind={k: round(v / SAMPLE_RATE, 1) for k, v in self._samples.items()},
            budget_bytes=0,
            in_use_bytes=0,
            devices=({"device": "fake", "backend": FAKE_BACKEND, "batches": self._answered},),
            healthy=self.healthy,
        )

    def _deliver(self, request: InferenceRequest, key: int) -> None:
        timers = self._timers.get(request.session_id, {})
        timers.pop(key, None)
        if not timers:
            self._timers.pop(request.session_id, None)
        self._answered += 1
        self._samples[request.kind.value] += request.num_samples
        transcript = fake_transcript(request.num_samples, request.options.itn)
        channel = self._channels.get(request.session_id)
        if channel is not None:
            channel.put_nowait(InferenceResult(request.ref, transcript))
        self._note_idle()

    def _note_idle(self) -> None:
        if not self._timers:
            self._idle.set()


async def serve_fake(cost: DeclaredCost, path: str, announce: Callable[[str], None]) -> None:
    """Serve a declared-cost engine on `path` until SIGTERM or SIGINT, then close both."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    engine = DeclaredCostEngine(cost)
    engine.start()
    replica_id = f"fake-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        server = await serve_replica(EngineReplica(engine, replica_id, fake_report(cost)), path)
        try:
            announce(path)
            await stop.wait()
        finally:
            await server.close()
    finally:
        await engine.close(CLOSE_TIMEOUT_S)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tools.bench.capacity.fake_engine",
        description="Serve a declared-cost fake engine (no model, no CPU) on a Unix socket.",
    )
    p.add_argument("--socket", required=True, help="the socket's path, in a private folder")
    p.add_argument("--cost-ms-per-audio-s", type=float, default=0.0, help="per audio second")
    p.add_argument("--fixed-ms", type=float, default=0.0, help="added to every answer")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        cost = DeclaredCost(args.fixed_ms, args.cost_ms_per_audio_s)
        if not Path(args.socket).parent.is_dir():
            raise ValueError(f"no folder for the socket {args.socket}")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def announce(path: str) -> None:
        print(f"{READY_LINE}{path}", flush=True)

    try:
        asyncio.run(serve_fake(cost, args.socket, announce))
    except OSError as exc:
        print(f"error: cannot serve the fake engine: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
