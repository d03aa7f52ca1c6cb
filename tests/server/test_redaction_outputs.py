"""A card said aloud leaves a `--redact pci` server in no form (issue 48): every file API
format and every live protocol, their texts and their token ids decoded with the demo
model's own tokenizer (which is public: an id is as good as the digit it spells)."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sentencepiece as spm
import soundfile
import soxr
import websockets
from funasr_client import async_file_asr_stream

from engine.model.directory import load_model_dir
from sensestream.client import run_session
from tests.callcentre.audiohook_emulator import AudioHookCall, play
from tests.server.conftest import ServerProcess
from tests.server.test_redaction import REFERENCE, post_upload, recording
from tests.server.test_redaction import server as redacting_server
from tests.server.test_webhooks import Receiver, receiving
from tests.speech import to_s16le
from tools.g711 import encode_mulaw

CARD_NUMBER = "4111111111111111"
CARD = f"my card number is four {' '.join(['one'] * 15)}"
#: What REFERENCE is written as: a number no policy takes, which shows digits get through.
OTHER_NUMBER = "97543"
#: A run of this many of the card's digits in a row is a leak (its last four included).
LEAK_DIGITS = 4
TIMEOUT_S = 120.0
COMPLETED = "conversation.item.input_audio_transcription.completed"


# The same `--redact pci` demo-model server, with webhooks, as test_redaction's (one per
# module).
server = redacting_server


@pytest.fixture(scope="module")
def talk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The card, then a number that is no card's, in one recording."""
    return recording(tmp_path_factory.mktemp("redaction-outputs"), CARD, REFERENCE)


@pytest.fixture(scope="module")
def tokenizer(demo_model: Path) -> spm.SentencePieceProcessor:
    """The demo model's sentencepiece model, loaded by sentencepiece itself."""
    path = load_model_dir(demo_model).tokenizer_path
    return spm.SentencePieceProcessor(model_file=str(path))


def carried(obj: Any, key: str = "") -> Iterator[str | list[int]]:
    """Every string in a JSON value, and every id list (a `tokens` list of numbers)."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from carried(v, k)
    elif isinstance(obj, list):
        if key == "tokens" and obj and all(isinstance(i, int) for i in obj):
            yield [int(i) for i in obj]
        else:
            for item in obj:
                yield from carried(item, key)


class Seen:
    """What one output carried: its texts, and its id lists decoded as the model would."""

    def __init__(self, tokenizer: spm.SentencePieceProcessor) -> None:
        self._sp = tokenizer
        self.texts: list[str] = []
        self.decoded: list[str] = []

    def add(self, obj: Any) -> Seen:
        for item in carried(obj):
            if isinstance(item, str):
                self.texts.append(item)
                continue
            size = self._sp.get_piece_size()
            assert all(0 <= i < size for i in item), f"ids outside the vocabulary: {item}"
            self.decoded.append(str(self._sp.decode(item)))
        return self

    def check(self, what: str, *, ids: bool = False) -> None:
        """Nothing of the card, the placeholder where it was, and the other number there
        (so digits do get through: the check could see them); with `ids`, some id lists
        were decoded and the other number is among them."""
        everything = self.texts + self.decoded
        assert leaks(everything) == [], (what, leaks(everything))
        joined = "\n".join(self.texts)
        assert "[PCI]" in joined and OTHER_NUMBER in joined, (what, self.texts)
        if ids:
            assert any(OTHER_NUMBER in text for text in self.decoded), (what, self.decoded)


def leaks(texts: list[str]) -> list[str]:
    """The texts holding a run of `LEAK_DIGITS` or more of the card's digits, in order
    (spaces and dashes between digits aside)."""
    out = []
    for text in texts:
        squashed = re.sub(r"(?<=\d)[\s\-.]+(?=\d)", "", text)
        runs = re.findall(rf"\d{{{LEAK_DIGITS},}}", squashed)
        if any(_in_card(run) for run in runs):
            out.append(text)
    return out


def _in_card(run: str) -> bool:
    return any(run[i : i + LEAK_DIGITS] in CARD_NUMBER for i in range(len(run) - LEAK_DIGITS + 1))


def test_the_leak_check_sees_a_card_however_it_is_written() -> None:
    assert leaks(["are 4111 1111", "x 411111111111111.", "1-1-1-1", "ref 97543", "41 11"]) == [
        "are 4111 1111",
        "x 411111111111111.",
        "1-1-1-1",
        "41 11",
    ]


# ---- the file API ---------------------------------------------------------------------


@pytest.mark.parametrize("response_format", ["json", "text", "srt", "vtt", "stream"])
def test_no_file_format_carries_the_card(
    server: ServerProcess, talk: Path, tokenizer: spm.SentencePieceProcessor, response_format: str
) -> None:
    fields = [("response_format", response_format)]
    if response_format == "stream":  # json's deltas as server-sent events
        fields = [("response_format", "json"), ("stream", "true")]
    body = post_upload(server, talk, fields)
    seen = Seen(tokenizer).add(body)
    if response_format == "json":
        seen.add(json.loads(body))
    if response_format == "stream":
        events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]
        assert [e["type"] for e in events][-1] == "transcript.text.done", body
        seen.add(events)
    seen.check(response_format)


def test_verbose_json_segments_and_words_carry_no_card_as_text_or_token_ids(
    server: ServerProcess, talk: Path, tokenizer: spm.SentencePieceProcessor
) -> None:
    fields = [
        ("response_format", "verbose_json"),
        ("timestamp_granularities[]", "segment"),
        ("timestamp_granularities[]", "word"),
    ]
    answer = json.loads(post_upload(server, talk, fields))
    assert len(answer["segments"]) == 2 and answer["words"], answer
    Seen(tokenizer).add(answer).check("verbose_json", ids=True)
    words = " ".join(w["word"] for w in answer["words"])
    assert "[PCI]" in words and not any(ch.isdigit() for ch in words.split(OTHER_NUMBER)[0])


# ---- live protocols -------------------------------------------------------------------


def pcm(wav: Path, rate: int = 16000) -> np.ndarray:
    samples, wav_rate = soundfile.read(wav, dtype="float32")
    return samples if rate == wav_rate else soxr.resample(samples, wav_rate, rate)


async def follow(url: str) -> list[dict[str, Any]]:
    """Every event a follower of a stream is sent, up to its `end`."""
    out = []
    async with websockets.connect(url) as socket:
        async for message in socket:
            out.append(json.loads(message))
            if out[-1].get("type") == "end":
                break
    return out


def test_a_v1_stream_its_follower_and_its_webhook_carry_no_card(
    server: ServerProcess, talk: Path, tokenizer: spm.SentencePieceProcessor, hook_port: int
) -> None:
    stream_id = f"card-{uuid.uuid4().hex[:8]}"
    follower_url = server.url.replace("/ws", f"/v1/streams/{stream_id}/events") + "?wait=30"

    async def scenario() -> tuple[list[Any], list[Any], list[Any]]:
        receiver = Receiver()
        async with receiving(receiver, hook_port) as hook:
            follower = asyncio.create_task(follow(follower_url))
            await asyncio.sleep(0.5)
            # At real time, so partials come as a live caller's would.
            start = {"type": "start", "stream_id": stream_id, "webhook_url": hook}
            outcome = await run_session(server.url, to_s16le(pcm(talk)), start=start, speed=1.0)
            await asyncio.wait_for(receiver.got_end.wait(), 30)
            followed = await asyncio.wait_for(follower, 30)
        return outcome.events, followed, [b["event"] for b in receiver.bodies]

    sent, followed, posted = asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))
    finals = [e for e in sent if e["type"] == "final"]
    assert len(finals) == 2 and all(f["tokens"] for f in finals), finals
    assert [e for e in sent if e["type"] == "partial"], "no partials to check"
    for what, events in (("v1", sent), ("follower", followed), ("webhook", posted)):
        Seen(tokenizer).add(events).check(what)


def test_openai_realtime_carries_no_card(
    server: ServerProcess, talk: Path, tokenizer: spm.SentencePieceProcessor
) -> None:
    url = server.url.replace("/ws", "/v1/realtime") + "?intent=transcription"
    pcm_24k = {"format": {"type": "audio/pcm", "rate": 24000}}
    session = {"type": "transcription", "audio": {"input": pcm_24k}}
    audio = to_s16le(pcm(talk, 24000))
    silence = json.dumps({"type": "input_audio_buffer.append", "audio": "AAAA" * 1600})

    async def keep_talking(ws: Any) -> None:
        """Silence, as a live caller's line goes on: the VAD closes the last utterance, and
        a final held in case a card goes on is let go once it has waited."""
        while True:
            await ws.send(silence)  # 100 ms
            await asyncio.sleep(0.2)

    async def scenario() -> list[dict[str, Any]]:
        async with websockets.connect(url) as ws:
            await ws.send(json.dumps({"type": "session.update", "session": session}))
            for i in range(0, len(audio), 4800):
                piece = base64.b64encode(audio[i : i + 4800]).decode()
                await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": piece}))
            line = asyncio.create_task(keep_talking(ws))
            events: list[dict[str, Any]] = []
            async for message in ws:
                events.append(json.loads(message))
                kinds = [e["type"] for e in events]
                if kinds.count(COMPLETED) == 2 or "error" in kinds:
                    break
            line.cancel()
            return events

    events = asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))
    assert [e for e in events if e["type"] == "error"] == []
    completed = [e for e in events if e["type"] == COMPLETED]
    assert len(completed) == 2 and completed[0]["sensevoice"]["tokens"], completed
    Seen(tokenizer).add(events).check("openai realtime")


@pytest.mark.parametrize("mode", ["offline", "2pass"])
def test_funasr_results_and_their_timestamps_carry_no_card(
    server: ServerProcess, talk: Path, tokenizer: spm.SentencePieceProcessor, mode: str
) -> None:
    url = f"ws://127.0.0.1:{server.port}/funasr"

    async def scenario() -> list[dict[str, Any]]:
        return [dict(m) async for m in async_file_asr_stream(talk, url, mode=mode)]  # type: ignore[arg-type]

    messages = asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))
    stamped = [m for m in messages if m.get("stamp_sents")]
    assert len(stamped) == 2, messages
    Seen(tokenizer).add(messages).check(f"funasr {mode}")


def test_audiohook_transcripts_and_their_words_carry_no_card(
    server: ServerProcess, talk: Path, tokenizer: spm.SentencePieceProcessor
) -> None:
    url = server.url.replace("/ws", "/audiohook")
    call = AudioHookCall(
        encode_mulaw(pcm(talk, 8000)), str(uuid.uuid4()), channels=("external",), speed=4.0
    )
    run = asyncio.run(asyncio.wait_for(play(url, call), TIMEOUT_S))
    assert run.problems == [], run.problems
    transcripts = run.transcripts()
    shown = [i for d in transcripts for i in d["alternatives"][0]["interpretations"]]
    words = [t for interpretation in shown for t in interpretation.get("tokens", [])]
    assert len(transcripts) == 2 and words, run.messages
    Seen(tokenizer).add(run.messages).check("audiohook")


def test_the_server_log_holds_no_card(server: ServerProcess, talk: Path) -> None:
    post_upload(server, talk, [("response_format", "text")])  # at least one card went by
    assert leaks(server.log) == []
