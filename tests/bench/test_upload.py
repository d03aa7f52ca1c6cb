"""The upload bench's pure parts: its multipart body and its latency measure."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from sensestream.client import Outcome
from server.files.uploads import read_upload
from tools.bench.upload.cli import after_vad_ms
from tools.bench.upload.upload import _body, _parts


def test_the_streamed_body_is_a_form_the_server_reads(tmp_path: Path) -> None:
    wav = tmp_path / "call.wav"
    wav.write_bytes(bytes(range(256)) * 1000)
    head, tail = _parts(wav, "b0undary", {"model": "whisper-1", "response_format": "json"})
    chunks = list(_body(wav, head, tail))

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    upload = asyncio.run(
        read_upload("multipart/form-data; boundary=b0undary", None, body(), 1 << 20)
    )
    assert upload.fields == {"model": ["whisper-1"], "response_format": ["json"]}
    assert upload.filename == "call.wav" and upload.audio_file().read() == wav.read_bytes()


def frames(start: float, count: int) -> Iterator[float]:
    return (start + 0.1 * i for i in range(count))


def test_latency_counts_from_when_the_audio_up_to_the_decision_was_sent() -> None:
    outcome = Outcome(sent_at=list(frames(100.0, 50)))
    final = {"type": "final", "text": "hi", "decided_ms": 1250}
    outcome.events = [final, {"type": "final", "text": "", "decided_ms": 2000}]
    outcome.times = [101.45, 103.0]
    # decided at 1250 ms: the frame ending at 1300 ms (index 12) went out at 101.2 s.
    assert [round(v) for v in after_vad_ms(outcome)] == [250]
