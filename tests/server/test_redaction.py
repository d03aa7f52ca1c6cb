"""Redaction on a real server with the demo model: live finals, followers and files."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import soundfile
import websockets

from tests.server.conftest import REPO, ServerProcess
from tests.server.test_webhooks import Receiver, receiving
from tools.speech import synthesize

#: The demo model writes a card's digits after card words ("... the card are 41111111.")
#: and a reference number without them.
CARD = "the last digits of the card are four one one one one one one one"
REFERENCE = "your reference number is nine seven five four three"
SECRET = "webhook-secret-0123456789"


@pytest.fixture(scope="module")
def server(demo_model: Path, hook_port: int) -> Iterator[ServerProcess]:
    hooks = ("--webhook-allow", f"http://127.0.0.1:{hook_port}/", "--webhook-secret", SECRET)
    proc = ServerProcess(demo_model, "--redact", "pci", *hooks)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def talk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two sentences in one recording, a pause between them."""
    return recording(tmp_path_factory.mktemp("redaction"), CARD, REFERENCE)


def recording(folder: Path, *sentences: str, gap_s: float = 1.2) -> Path:
    """The sentences in one recording (espeak-ng en-us), `gap_s` of silence between them."""
    parts = [synthesize(text, "en-us", folder) for text in sentences]
    gap = folder / f"gap-{gap_s}.wav"
    silence = ["-n", "-r", "16000", "-c", "1", "-b", "16", str(gap)]
    subprocess.run(["sox", *silence, "trim", "0", str(gap_s)], check=True)
    joined = [str(p) for part in parts for p in (part, gap)][:-1]
    out = folder / f"talk-{uuid.uuid4().hex[:8]}.wav"
    subprocess.run(["sox", *joined, str(out)], check=True)
    return out


def stream(server: ServerProcess, wav: Path, *extra: str) -> list[dict[str, object]]:
    run = subprocess.run(
        [sys.executable, "scripts/stream_file.py", str(wav), "--url", server.url,
         "--speed", "0", "--format", "jsonl", *extra],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return [json.loads(line) for line in run.stdout.splitlines()]


def test_a_card_never_reaches_a_client_and_other_numbers_do(
    server: ServerProcess, talk: Path
) -> None:
    finals = stream(server, talk)
    texts = [str(f["text"]) for f in finals]
    assert len(texts) == 2, texts
    assert "card" in texts[0].lower() and "[PCI]" in texts[0]
    assert not any(ch.isdigit() for ch in texts[0])
    assert "97543" in texts[1]  # pci leaves a number that is no card's
    assert finals[0]["redactions"] and "redactions" not in finals[1]


def events(server: ServerProcess, wav: Path, pace: str = "replay") -> list[dict[str, object]]:
    """Every event a v1 stream is sent for `wav`, partials too."""

    async def run() -> list[dict[str, object]]:
        async with websockets.connect(server.url) as ws:
            await ws.send(json.dumps({"type": "start", "pace": pace}))
            samples, rate = soundfile.read(wav, dtype="int16")
            assert rate == 16000
            audio = samples.tobytes()
            for i in range(0, len(audio), 3200):
                await ws.send(audio[i : i + 3200])
                if pace == "live":  # 100 ms of audio every 100 ms, as a microphone sends
                    await asyncio.sleep(0.1)
            await ws.send(json.dumps({"type": "stop"}))
            return [json.loads(m) async for m in ws]

    return asyncio.run(run())


@pytest.mark.parametrize(
    "sentences",
    [
        # A whole card (4111 1111 1111 1111), then a number that is no card's.
        (f"my card number is four {' '.join(['one'] * 15)}", REFERENCE),
        # A card read in two utterances (5555 5555 5555 4444): neither half may show.
        ("my card number is five five five five five five five five",
         "the last eight digits are five five five five four four four four"),
    ],
    ids=["whole", "halves"],
)  # fmt: skip
def test_no_digit_of_a_card_read_aloud_reaches_a_partial_or_a_final(
    server: ServerProcess, tmp_path: Path, sentences: tuple[str, str]
) -> None:
    sent = events(server, recording(tmp_path, *sentences))
    finals = [str(e["text"]) for e in sent if e["type"] == "final"]
    partials = [str(e["text"]) for e in sent if e["type"] == "partial"]
    assert len(finals) == 2 and "[PCI]" in finals[0], finals
    card_said = [finals[0]] + ([finals[1]] if sentences[1] != REFERENCE else [])
    assert not any(ch.isdigit() for text in card_said + partials for ch in text), sent
    if sentences[1] == REFERENCE:
        assert "97543" in finals[1]
    else:
        assert "[PCI]" in finals[1]


def test_a_follower_sees_what_the_stream_sees(server: ServerProcess, talk: Path) -> None:
    stream_id = f"call-{uuid.uuid4().hex[:8]}"

    async def follow() -> list[str]:
        url = server.url.replace("/ws", f"/v1/streams/{stream_id}/events") + "?wait=30"
        texts = []
        async with websockets.connect(url) as socket:
            async for message in socket:
                event = json.loads(message)
                if event.get("type") == "final":
                    texts.append(str(event["text"]))
                if event.get("type") == "end":
                    return texts
        return texts

    async def both() -> list[str]:
        follower = asyncio.create_task(follow())
        await asyncio.sleep(0.5)
        await asyncio.to_thread(stream, server, talk, "--stream-id", stream_id)
        return await asyncio.wait_for(follower, 60)

    texts = asyncio.run(both())
    assert len(texts) == 2 and "[PCI]" in texts[0] and not any(c.isdigit() for c in texts[0])


def test_a_webhook_is_posted_what_the_stream_is_sent(
    server: ServerProcess, talk: Path, hook_port: int
) -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        receiver = Receiver()
        async with receiving(receiver, hook_port) as hook:
            async with websockets.connect(server.url) as ws:
                await ws.send(json.dumps({"type": "start", "pace": "replay", "webhook_url": hook}))
                samples, rate = soundfile.read(talk, dtype="int16")
                assert rate == 16000
                audio = samples.tobytes()  # v1's default: 16 kHz s16le mono
                for i in range(0, len(audio), 3200):
                    await ws.send(audio[i : i + 3200])
                await ws.send(json.dumps({"type": "stop"}))
                sent = [json.loads(m) async for m in ws]
            await asyncio.wait_for(receiver.got_end.wait(), 30)
        posted = [b["event"] for b in receiver.bodies]
        return [str(e["text"]) for e in sent if e["type"] == "final"], [
            str(e["text"]) for e in posted if e["type"] == "final"
        ]

    sent, posted = asyncio.run(scenario())
    assert posted == sent and len(sent) == 2
    assert "[PCI]" in posted[0] and not any(ch.isdigit() for ch in posted[0])


def test_an_upload_is_redacted_in_every_format(server: ServerProcess, talk: Path) -> None:
    for response_format in ("json", "verbose_json", "srt", "vtt", "text"):
        body = upload(server, talk, response_format)
        assert "[PCI]" in body and "41111" not in body, (response_format, body)
        assert "97543" in body


def upload(server: ServerProcess, wav: Path, response_format: str) -> str:
    return post_upload(server, wav, [("response_format", response_format)])


def post_upload(server: ServerProcess, wav: Path, fields: list[tuple[str, str]]) -> str:
    """The file API's answer for `wav` with these form fields (the model's is given)."""
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in [("model", "whisper-1"), *fields]
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="talk.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\n".encode()
        + wav.read_bytes()
        + b"\r\n"
    )
    request = urllib.request.Request(
        server.server.http_url + "/v1/audio/transcriptions",
        data=b"".join(parts) + f"--{boundary}--\r\n".encode(),
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        return str(answer.read().decode())


def test_a_held_final_reaches_followers_and_webhooks_when_the_client_drops(
    server: ServerProcess, tmp_path: Path, hook_port: int
) -> None:
    # "My card number is 5555 5555." may begin a card: redaction holds it for the next
    # part. The client then goes away without `stop`: what was said is still owed.
    wav = recording(tmp_path, "my card number is five five five five five five five five")
    stream_id = f"drop-{uuid.uuid4().hex[:8]}"

    async def follow() -> list[dict[str, object]]:
        url = server.url.replace("/ws", f"/v1/streams/{stream_id}/events") + "?wait=30"
        seen = []
        async with websockets.connect(url) as socket:
            async for message in socket:
                seen.append(json.loads(message))
        return seen

    async def scenario() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        receiver = Receiver()
        async with receiving(receiver, hook_port) as hook:
            follower = asyncio.create_task(follow())
            await asyncio.sleep(0.5)
            async with websockets.connect(server.url) as ws:
                start = {"type": "start", "pace": "replay", "stream_id": stream_id}
                await ws.send(json.dumps({**start, "webhook_url": hook}))
                samples, _ = soundfile.read(wav, dtype="int16")
                audio = samples.tobytes() + bytes(2 * 16000 * 2)  # 2 s of silence after
                for i in range(0, len(audio), 3200):
                    await ws.send(audio[i : i + 3200])
                await asyncio.sleep(2.0)  # decoded and held: no input releases it now
            seen = await asyncio.wait_for(follower, 30)
            await asyncio.wait_for(receiver.got_end.wait(), 30)
        return seen, [b["event"] for b in receiver.bodies]

    seen, posted = asyncio.run(scenario())
    for events_ in (seen, posted):
        kinds = [str(e["type"]) for e in events_ if e["type"] in ("final", "error", "end")]
        assert kinds == ["final", "error", "end"], events_
        (final,) = [e for e in events_ if e["type"] == "final"]
        assert "[PCI]" in str(final["text"]) and not any(c.isdigit() for c in str(final["text"]))
        (error,) = [e for e in events_ if e["type"] == "error"]
        assert error["code"] == "session_closed"


def test_a_card_read_at_the_pace_of_speech_with_a_long_pause_is_caught(
    server: ServerProcess, tmp_path: Path
) -> None:
    # Read as it is spoken: the second half starts 2.5 s after the first (the end silence
    # is 0.5 s) and takes 3 s to say, so its final comes well after a fixed 3 s hold.
    # Neither half names the card (the demo model writes "The number is 55555555." and
    # "The last e digits of 55554444."): only the join, by the Luhn check, tells.
    halves = (
        "the number is five five five five five five five five",
        "the rest is five five five five four four four four",
    )
    sent = events(server, recording(tmp_path, *halves, gap_s=2.5), pace="live")
    finals = [str(e["text"]) for e in sent if e["type"] == "final"]
    assert len(finals) == 2 and all("[PCI]" in text for text in finals), finals
    assert not any(ch.isdigit() for e in sent for ch in str(e.get("text", ""))), sent


def test_a_held_final_goes_out_on_time_to_a_client_that_sends_nothing_more(
    server: ServerProcess, tmp_path: Path
) -> None:
    # The client has sent its audio and waits (no `stop`, no more frames): the final that
    # redaction holds must come when its wait is over, not at the idle timeout (30 s).
    wav = recording(tmp_path, "my card number is five five five five five five five five")

    async def run() -> tuple[dict[str, object], float]:
        async with websockets.connect(server.url) as ws:
            await ws.send(json.dumps({"type": "start", "pace": "replay"}))
            samples, _ = soundfile.read(wav, dtype="int16")
            audio = samples.tobytes() + bytes(2 * 16000 * 2)  # 2 s of silence after
            for i in range(0, len(audio), 3200):
                await ws.send(audio[i : i + 3200])
            sent = asyncio.get_running_loop().time()
            async with asyncio.timeout(10):
                async for message in ws:
                    event = json.loads(message)
                    if event["type"] == "final":
                        return event, asyncio.get_running_loop().time() - sent
        raise AssertionError("the stream ended without its final")

    final, after_s = asyncio.run(run())
    assert "[PCI]" in str(final["text"]) and not any(c.isdigit() for c in str(final["text"]))
    assert after_s < 6.0  # HOLD_S (3 s) of quiet after the final, and its decode
