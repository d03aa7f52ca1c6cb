"""Live final latency with and without a concurrent long upload, side by side in one run.

Rounds alternate: live streams alone, then the same streams while a long recording is
transcribed through POST /v1/audio/transcriptions, again and again until the live phase
ends, so those streams never run without an upload. Latency is measured from the moment
the client had sent the audio up to where the VAD closed the utterance (`decided_ms`) to
the final's arrival: the engine's share, which is what an upload competes for.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from sensestream.client import Outcome, bearer, pcm16, run_session
from tools.bench.common.cli import add_json, add_rounds, parser_for
from tools.bench.common.finals import latencies_ms
from tools.bench.common.output import machine, write_json
from tools.bench.common.stats import percentiles
from tools.bench.upload.upload import UploadResult, upload
from tools.spawn import ServerSpec, spawn
from tools.speech import speak

SR = 16000
FRAME_MS = 100
SENTENCES = (
    "The quarterly report shows steady growth in every region.",
    "Please call me back when you have a moment this afternoon.",
    "Our next meeting is planned for Thursday at ten o'clock.",
    "The delivery was late because of the storm last night.",
)


def parser() -> argparse.ArgumentParser:
    p = parser_for(__doc__)
    p.add_argument("--model", help="model dir for the spawned server")
    p.add_argument("--test-model-size", default="full", help="without --model: tiny or full")
    p.add_argument("--streams", type=int, default=4, help="live streams per phase")
    p.add_argument("--live-s", type=float, default=40.0, help="audio per live stream")
    p.add_argument("--upload-minutes", type=float, default=10.0)
    add_rounds(p, 2, "without/with pairs")
    p.add_argument("--server-arg", action="append", default=[], help="extra server option")
    add_json(p, required=True)
    return p


def conversation(seconds: float, offset: int, cache: Path) -> np.ndarray:
    """Sentences with pauses, rotated per stream so streams do not speak in unison."""
    pause = np.zeros(int(1.2 * SR), np.float32)
    parts: list[np.ndarray] = [np.zeros(int(0.3 * SR * (offset + 1)), np.float32)]
    i = offset
    while sum(len(p) for p in parts) < seconds * SR:
        parts += [speak(SENTENCES[i % len(SENTENCES)], cache_dir=cache), pause]
        i += 1
    return np.concatenate(parts)[: int(seconds * SR)]


def after_vad_ms(outcome: Outcome) -> list[float]:
    """Each final's arrival less the moment the audio up to `decided_ms` had been sent."""
    return latencies_ms(outcome, "decided_ms", frame_ms=FRAME_MS, spoken_only=True)


async def live_phase(url: str, streams: Sequence[bytes], key: str | None) -> dict[str, Any]:
    outcomes = await asyncio.gather(
        *(run_session(url, audio, speed=1.0, headers=bearer(key), linger=600) for audio in streams)
    )
    values = [v for o in outcomes for v in after_vad_ms(o)]
    errors = sum(len(o.of("error")) for o in outcomes) + sum(not o.ended for o in outcomes)
    return {"latencies_ms": values, "errors": errors}


async def keep_uploading(
    http: str, wav: Path, key: str | None, stop: asyncio.Event
) -> list[UploadResult]:
    """Upload the recording again and again until `stop`: the live phase never runs alone."""
    results = []
    while not stop.is_set():
        results.append(await asyncio.to_thread(upload, http, wav, key))
    return results


async def with_upload(
    url: str, http: str, streams: Sequence[bytes], wav: Path, key: str | None
) -> tuple[dict[str, Any], list[UploadResult]]:
    stop = asyncio.Event()
    uploads = asyncio.create_task(keep_uploading(http, wav, key, stop))
    await asyncio.sleep(3.0)  # the upload is in and being decoded before live speech starts
    phase = await live_phase(url, streams, key)
    stop.set()
    return phase, await uploads


def summary(values: Sequence[float]) -> dict[str, Any]:
    p = percentiles(values)
    return {"count": p.count, "mean": p.mean, "p50": p.p50, "p95": p.p95, "p99": p.p99}


async def run(args: argparse.Namespace, url: str, http: str, work: Path) -> dict[str, Any]:
    cache = work / "speech"
    streams = [pcm16(conversation(args.live_s, i, cache)) for i in range(args.streams)]
    wav = work / "upload.wav"
    long = conversation(args.upload_minutes * 60, 0, cache)
    sf.write(wav, np.frombuffer(pcm16(long), "<i2"), SR, subtype="PCM_16")
    alone: list[float] = []
    loaded: list[float] = []
    rounds = []
    for _ in range(args.rounds):
        base = await live_phase(url, streams, None)
        busy, results = await with_upload(url, http, streams, wav, None)
        alone += base["latencies_ms"]
        loaded += busy["latencies_ms"]
        rounds.append(
            {
                "without": summary(base["latencies_ms"]) | {"errors": base["errors"]},
                "with": summary(busy["latencies_ms"]) | {"errors": busy["errors"]},
                "uploads": [
                    {
                        "status": r.status,
                        "seconds": round(r.seconds, 1),
                        "segments": r.finals,
                        "error": r.error,
                    }
                    for r in results
                ],
            }
        )
    without, with_ = summary(alone), summary(loaded)
    ratio = round(with_["p95"] / without["p95"], 3) if without["p95"] else None
    return {"without": without, "with": with_, "p95_ratio": ratio, "rounds": rounds}


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    options = ["--model", args.model] if args.model else ["--test-model-size", args.test_model_size]
    with (
        spawn(ServerSpec((*options, *args.server_arg), start_timeout_s=900)) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        result = asyncio.run(run(args, server.url, server.http_url, Path(tmp)))
    out = {
        "what": "live final latency after the VAD's decision, with and without an upload",
        **machine("cpu"),
        "model": args.model or f"test model ({args.test_model_size}, random weights)",
        "streams": args.streams,
        "live_s": args.live_s,
        "upload_minutes": args.upload_minutes,
        "server_args": args.server_arg,
        **result,
    }
    write_json(args.json, out, indent=1)
    print(json.dumps({k: out[k] for k in ("without", "with", "p95_ratio")}))
    return 0
