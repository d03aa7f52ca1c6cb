"""The real server on 127.0.0.1:0: finals, isolation, pacing, endpoints, loop lag."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from prometheus_client.parser import text_string_to_metric_families

from engine.backends.registry import BackendOptions, create_backend
from engine.decoding.recognizer import Recognizer
from engine.model.directory import load_model_dir
from engine.types import DecodeOptions
from sensestream.client import Outcome, run_session
from tests.server.conftest import REPO, ServerProcess
from tests.speech import Clip, three_sentences, to_s16le

SR = 16000


def quantized(audio: np.ndarray) -> np.ndarray:
    """What the server hears from an s16le client."""
    return np.frombuffer(to_s16le(audio), "<i2").astype(np.float32) / 32768


@pytest.fixture(scope="module")
def recognizer(tiny_model_dir: Path) -> Recognizer:
    model_dir = load_model_dir(tiny_model_dir)
    return Recognizer(model_dir, create_backend(model_dir, BackendOptions(precision="fp32")))


def offline_text(recognizer: Recognizer, audio: np.ndarray, start_ms: int, end_ms: int) -> str:
    segment = audio[start_ms * 16 : end_ms * 16]
    return recognizer.decode([recognizer.prepare(segment, DecodeOptions())])[0].text


def test_stream_file_gives_three_finals_equal_to_offline_transcribe(
    server: ServerProcess, speech_clips: list[Clip], tmp_path: Path
) -> None:
    audio = quantized(three_sentences(speech_clips))
    wav = tmp_path / "three.wav"
    sf.write(wav, audio, SR, subtype="PCM_16")
    run = subprocess.run(
        [
            sys.executable,
            "scripts/stream_file.py",
            str(wav),
            "--url",
            server.url,
            "--speed",
            "0",
            "--format",
            "jsonl",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    finals = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(finals) == 3
    segments = []
    for i, final in enumerate(finals):
        path = tmp_path / f"seg{i}.wav"
        sf.write(path, audio[final["start_ms"] * 16 : final["end_ms"] * 16], SR, subtype="PCM_16")
        segments.append(str(path))
    offline = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "transcribe",
            "--model",
            str(server.model),
            "--precision",
            "fp32",
            "--batch-size",
            "1",
            *segments,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    expected = [json.loads(line)["text"] for line in offline.stdout.splitlines()]
    assert [f["text"] for f in finals] == expected
    assert all(f["v"] == 1 and f["tokens"] for f in finals)


def test_twenty_concurrent_sessions_get_only_their_own_results(
    server: ServerProcess, speech_clips: list[Clip], recognizer: Recognizer
) -> None:
    silence = np.zeros(SR // 2, np.float32)
    audios = []
    for i in range(20):
        clip = speech_clips[i % len(speech_clips)].audio
        # A different utterance per session: trim a session-specific amount.
        clip = clip[: max(SR, len(clip) - 800 * (i // len(speech_clips)))]
        audios.append(quantized(np.concatenate([silence, clip, silence, silence])))

    async def all_sessions() -> list[Outcome]:
        return await asyncio.gather(
            *(run_session(server.url, to_s16le(a), chunk=3200, speed=0) for a in audios)
        )

    outcomes = asyncio.run(all_sessions())
    session_ids = {o.of("ready")[0]["session_id"] for o in outcomes}
    assert len(session_ids) == 20
    for audio, outcome in zip(audios, outcomes, strict=True):
        finals = outcome.of("final")
        assert finals, outcome.events
        assert outcome.events[-1]["type"] == "end" and outcome.close_code == 1000
        for final in finals:
            assert final["text"] == offline_text(
                recognizer, audio, final["start_ms"], final["end_ms"]
            )


def test_real_time_pace_delivers_partials_during_speech(
    server: ServerProcess, speech_clips: list[Clip]
) -> None:
    clip = speech_clips[6].audio  # about 10 s of speech
    audio = np.concatenate([np.zeros(SR // 2, np.float32), clip, np.zeros(SR, np.float32)])
    outcome = asyncio.run(run_session(server.url, to_s16le(audio), chunk=3200, speed=1.0))
    partials = outcome.of("partial")
    assert len(partials) >= 3
    first_final_at = outcome.times[outcome.events.index(outcome.of("final")[0])]
    partial_times = [
        t for e, t in zip(outcome.events, outcome.times, strict=True) if e["type"] == "partial"
    ]
    # Partials arrive while audio is still being sent, well before the final.
    assert partial_times[0] < outcome.audio_done_at - 3.0
    assert partial_times[0] < first_final_at
    assert all(p["end_ms"] > p["start_ms"] and "stable_chars" in p for p in partials)
    assert outcome.of("speech_started")[0]["start_ms"] <= partials[0]["start_ms"]


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples `name` whose labels include `labels` (with workers, each
    sample also names its process)."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def urgent_decodes(text: str) -> float:
    """Decodes that can be finals: a final's, or an early one sent during a pause."""
    return sum(
        metric(text, "engine_requests_total", kind=kind, outcome="ok")
        for kind in ("final", "early")
    )


def test_endpoints(server: ServerProcess, speech_clips: list[Clip]) -> None:
    assert server.http("/healthz") == (200, "ok\n")
    assert server.http("/readyz")[0] == 200
    status, body = server.http("/stats")
    stats = json.loads(body)
    assert status == 200 and stats["state"] == "ready" and stats["test_model"] is True
    assert stats["memory"]["budget_bytes"] > 0 and "queue" in stats and "batches" in stats
    before = urgent_decodes(server.http("/metrics")[1])
    audio = np.concatenate(
        [np.zeros(SR // 2, np.float32), speech_clips[1].audio, np.zeros(SR, np.float32)]
    )
    asyncio.run(run_session(server.url, to_s16le(audio)))
    text = server.http("/metrics")[1]
    assert urgent_decodes(text) > before
    for name in (
        "engine_batch_size_bucket",
        "engine_queue_delay_seconds_count",
        "engine_inference_seconds_count",
        "engine_memory_budget_bytes",
        "engine_memory_in_use_bytes",
        "engine_partials_dropped_total",
        "server_cold_start_seconds",
    ):
        assert re.search(rf"^{name}", text, re.M), name
    assert server.http("/nope")[0] == 404


def thread_cpu_s(pid: int, tid: int) -> float:
    """CPU seconds one thread of a process has run for, user and system (Linux /proc)."""
    stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text(encoding="ascii")
    fields = stat.rsplit(")", 1)[1].split()  # after the name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_event_loop_lag_stays_low_with_thirty_sessions(
    server: ServerProcess, speech_clips: list[Clip]
) -> None:
    # A timer's lag is the loop's own work plus the time a busy host gives it no CPU. Only
    # the first is the server's, and only it is asserted: as the loop thread's CPU time,
    # which a shared host cannot inflate (a thread waiting for a core runs up none). A loop
    # busy under half the time keeps its lag low; near all of it, lag grows on any host.
    # (Here: about 25 %; with the engine's batches run on the loop instead, about 60 %.)
    audio = to_s16le(np.concatenate([speech_clips[3].audio, np.zeros(SR, np.float32)]))
    # Each serving process runs its event loop on its main thread (tid == pid): the server,
    # or with workers every worker.
    processes = json.loads(server.http("/stats")[1]).get("processes")
    pids = [w["pid"] for w in processes["workers"]] if processes else [server.proc.pid]

    async def thirty() -> list[Outcome]:
        return await asyncio.gather(
            *(run_session(server.url, audio, chunk=3200, speed=1.0) for _ in range(30))
        )

    before = server.http("/metrics")[1]
    cpu_before, started = [thread_cpu_s(pid, pid) for pid in pids], time.monotonic()
    outcomes = asyncio.run(thirty())
    # The clients pace the audio at real time: the wall time is at least the audio's.
    wall = time.monotonic() - started
    busy = max(thread_cpu_s(p, p) - b for p, b in zip(pids, cpu_before, strict=True))
    after = server.http("/metrics")[1]
    assert all(o.of("end") and o.close_code == 1000 for o in outcomes)
    # The server's own lag watcher (what /metrics shows) kept measuring while they ran.
    ticks = "server_event_loop_lag_seconds_count"
    assert metric(after, ticks) > metric(before, ticks)
    assert busy < 0.5 * wall, f"the event loop ran {busy:.2f} s of CPU in {wall:.2f} s"
