"""Errors a new user meets, in words about their own input (issue 38, item 4).

A file the API cannot decode is named by its form filename, never by the repr of the
server's spooled copy; a damaged mp3's libmpg123 chatter goes to the DEBUG log, not to
the server's stderr; `ray://…` with no cluster is a one-line start-up error.
"""

from __future__ import annotations

import asyncio
import io
import logging
import queue
import sys
import tempfile
import threading
import time
import types
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from prometheus_client import CollectorRegistry

from server.engines.attach import RayUnreachableError, open_remote
from server.engines.url import RayAddress
from server.files.transcriptions import FileAudio, reference_audio
from server.files.uploads import Upload, read_upload
from server.main import main
from streaming.protocols.openai.files import FileApiError
from tests.server.inprocess import serving
from tests.server.test_upload_slots import multipart, port_of, post

SR = 16000
#: What libmpg123 prints on a damaged stream (to C's stderr, unless captured).
CHATTER = ("libmpg123", "Illegal Audio-MPEG-Header", "part2_3_length", "dequantization")
NOT_AUDIO = b"these are meeting notes, not samples\n" * 100
#: Ray's own words when `ray.init(address="auto")` finds no cluster.
NO_RAY = (
    "Could not find any running Ray instance. Please specify the one to connect to by "
    "setting `--address` flag or `RAY_ADDRESS` environment variable."
)


def damaged_mp3(seconds: float = 3.0) -> bytes:
    """A tone with noise as mp3 (libsndfile's LAME), then every 97th byte flipped: enough
    broken frames for libmpg123 to complain about, and enough whole ones to decode."""
    t = np.arange(int(seconds * SR)) / SR
    rng = np.random.default_rng(0)
    tone = 0.3 * np.sin(2 * np.pi * 440 * t) * np.sin(2 * np.pi * 1.3 * t)
    samples = (tone + 0.05 * rng.standard_normal(len(t))).astype(np.float32)
    out = io.BytesIO()
    sf.write(out, samples, SR, format="MP3")
    data = bytearray(out.getvalue())
    for i in range(1000, len(data), 97):
        data[i] ^= 0x5A
    return bytes(data)


def spooled(data: bytes) -> Any:
    """The upload as the server holds it (`server.files.uploads`)."""
    file = tempfile.SpooledTemporaryFile(1 << 20)  # noqa: SIM115
    file.write(data)
    file.seek(0)
    return file


def decode_all(audio: FileAudio) -> int:
    samples = 0
    while (chunk := audio.read()) is not None:
        samples += len(chunk)
    return samples


def wait_for_debug(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    """The chatter arrives on a reader thread: wait a little for it."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if any(r.levelno == logging.DEBUG and text in r.getMessage() for r in caplog.records):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def port(tiny_model_dir: Path) -> Iterator[int]:
    """A server in this process (on a thread of its own), so each test captures its
    stderr (capfd) and log (caplog)."""
    ports: queue.Queue[int] = queue.Queue()
    stop = threading.Event()

    async def run() -> None:
        async with serving(tiny_model_dir) as (_, url):
            ports.put(port_of(url))
            await asyncio.to_thread(stop.wait)

    thread = threading.Thread(target=asyncio.run, args=(run(),), name="file-api-server")
    thread.start()
    try:
        yield ports.get(timeout=180)
    finally:
        stop.set()
        thread.join(60)


def test_a_file_that_is_not_audio_is_refused_by_its_name(port: int) -> None:
    status, body = post(port, multipart(NOT_AUDIO, "talk.txt"))
    assert status == 415
    error = body["error"]
    assert error["param"] == "file" and error["type"] == "invalid_request_error"
    assert error["message"].startswith("cannot decode talk.txt: not an audio file (")
    assert "object at 0x" not in error["message"]


def test_a_damaged_mp3_is_transcribed_with_no_decoder_chatter_on_stderr_or_at_warning(
    port: int, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    status, body = post(port, multipart(damaged_mp3(), "talk.mp3"))
    assert status == 200, body
    err = capfd.readouterr().err
    assert not [word for word in CHATTER if word in err], err
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not loud


def test_decoder_chatter_is_kept_at_debug_with_the_file_name(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    audio = FileAudio(spooled(damaged_mp3()), name="talk.mp3")
    try:
        assert decode_all(audio) > SR
    finally:
        audio.close()
    assert wait_for_debug(caplog, "libmpg123")
    chatter = [r.getMessage() for r in caplog.records if "libmpg123" in r.getMessage()]
    assert all(line.startswith("mp3 decoder, talk.mp3: ") for line in chatter), chatter
    assert not [word for word in CHATTER if word in capfd.readouterr().err]


@pytest.mark.parametrize(
    ("data", "name"),
    [(NOT_AUDIO, "talk.txt"), (b"ID3" + NOT_AUDIO, "talk.mp3"), (b"\xff\xfb" + NOT_AUDIO, "x.mp3")],
    ids=["text", "id3-then-text", "frame-sync-then-text"],
)
def test_an_undecodable_file_is_a_415_naming_it(data: bytes, name: str) -> None:
    with pytest.raises(FileApiError) as refused:
        FileAudio(spooled(data), name=name)
    assert refused.value.status == 415 and refused.value.param == "file"
    assert refused.value.message.startswith(f"cannot decode {name}: not an audio file (")
    assert "object at 0x" not in refused.value.message


def test_an_mp3_cut_short_decodes_what_it_has() -> None:
    whole = io.BytesIO()
    sf.write(whole, np.zeros(3 * SR, np.float32), SR, format="MP3")
    audio = FileAudio(spooled(whole.getvalue()[:3000]), name="cut.mp3")
    try:
        assert 0 < decode_all(audio) < 3 * SR
    finally:
        audio.close()


def test_closing_an_mp3_mid_file_ends_its_decoder_process() -> None:
    audio = FileAudio(spooled(damaged_mp3(seconds=20.0)), name="long.mp3")
    assert audio.read() is not None
    audio.close()
    assert audio._sf._proc.returncode is not None  # type: ignore[attr-defined]
    assert audio.read() is None


def test_the_name_quoted_back_has_no_folders_or_control_characters() -> None:
    assert Upload(filename="C:\\Users\\me\\talk.mp3").label() == "talk.mp3"
    assert Upload(filename="/home/me/talk\n.mp3").label() == "talk?.mp3"
    assert Upload(filename="").label() == "the uploaded file"
    assert len(Upload(filename="a" * 500).label()) == 80


def fake_ray(monkeypatch: pytest.MonkeyPatch, error: ConnectionError) -> None:
    """`engine.remote.ray_serve` whose `connect` fails as Ray's does with no cluster."""

    def connect(address: str, app: str) -> None:
        raise error

    module = types.ModuleType("engine.remote.ray_serve")
    module.connect = connect  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "engine.remote.ray_serve", module)


@pytest.mark.parametrize(
    ("address", "error", "says"),
    [
        ("auto", NO_RAY, "ray://auto (app sensestream): Could not find any running Ray instance;"),
        ("ray://head:10001", "ray client connection timeout", "ray://head:10001 (app sensestream)"),
    ],
)
def test_ray_with_no_cluster_is_one_line_saying_how_to_start_one(
    monkeypatch: pytest.MonkeyPatch, address: str, error: str, says: str
) -> None:
    fake_ray(monkeypatch, ConnectionError(error))
    with pytest.raises(RayUnreachableError) as failed:
        asyncio.run(open_remote(RayAddress(address), CollectorRegistry()))
    message = str(failed.value)
    assert "\n" not in message
    assert says in message and "make replicas" in message
    assert "--address` flag" not in message  # Ray's flag, not one of ours
    assert failed.value.code == "ray_unreachable"


def test_the_server_started_on_ray_with_no_cluster_exits_2_with_one_log_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake_ray(monkeypatch, ConnectionError(NO_RAY))
    assert main(["--engine-url", "ray://auto", "--port", "0", "--workers", "1"]) == 2
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None
    assert "\n" not in errors[0].getMessage()
    assert "[ray_unreachable]" in errors[0].getMessage()


def test_rays_note_about_sigterm_off_the_main_thread_is_kept_at_debug() -> None:
    ray_serve = pytest.importorskip("engine.remote.ray_serve")  # needs Ray installed
    note = logging.LogRecord(
        "ray._private.worker",
        logging.WARNING,
        __file__,
        1,
        "SIGTERM handler is not set because current thread is not the main thread.",
        None,
        None,
    )
    other = logging.LogRecord(
        "ray._private.worker", logging.WARNING, __file__, 1, "something else", None, None
    )
    quiet, logger = ray_serve.OffMainThreadNote(), logging.getLogger("ray._private.worker")
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        assert not quiet.filter(note) and note.levelno == logging.DEBUG
        assert quiet.filter(other) and other.levelno == logging.WARNING
    finally:
        logger.setLevel(level)


def wav_bytes(seconds: float) -> bytes:
    buffer = io.BytesIO()
    tone = 0.1 * np.sin(np.arange(int(seconds * 8000)) / 8000 * 2 * np.pi * 220)
    sf.write(buffer, tone.astype(np.float32), 8000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def test_a_known_speakers_reference_is_2_to_10_s_of_audio_at_16_khz() -> None:
    audio = reference_audio(wav_bytes(3.0), 0)
    assert audio.dtype == np.float32 and abs(audio.size - 48000) <= 160  # resampled
    for data, fragment in ((wav_bytes(1.0), "must hold 2 to 10 s"), (b"hello", "is not audio")):
        with pytest.raises(FileApiError) as caught:
            reference_audio(data, 2)
        assert caught.value.status == 400 and fragment in caught.value.message
        assert caught.value.param == "known_speaker_references[2]"


def test_a_long_reference_is_refused_by_its_stated_length_before_it_is_decoded() -> None:
    buffer = io.BytesIO()
    sf.write(buffer, np.zeros(8000 * 600, np.int16), 8000, format="FLAC")  # 10 min of quiet
    assert len(buffer.getvalue()) < 4 << 20  # it fits a form field
    with pytest.raises(FileApiError) as caught:
        reference_audio(buffer.getvalue(), 0)
    assert caught.value.status == 400 and "holds more" in caught.value.message


def text_fields(fields: list[tuple[str, str]]) -> bytes:
    """A multipart body of text fields (repeated names allowed) and a file, boundary `b`."""
    parts = [
        f'--b\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        for name, value in fields
    ]
    audio = '--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\nRIFF\r\n'
    return ("".join(parts) + audio + "--b--\r\n").encode()


async def one_chunk(data: bytes) -> AsyncIterator[bytes]:
    yield data


def test_more_reference_fields_than_known_speakers_are_refused_as_they_arrive() -> None:
    four = [("known_speaker_references[]", "data:,x")] * 4
    kind = "multipart/form-data; boundary=b"
    upload = asyncio.run(read_upload(kind, None, one_chunk(text_fields(four)), 1 << 30))
    assert len(upload.fields["known_speaker_references[]"]) == 4
    body = text_fields([*four, ("known_speaker_references[]", "data:,x")])
    with pytest.raises(FileApiError) as caught:
        asyncio.run(read_upload(kind, None, one_chunk(body), 1 << 30))
    assert caught.value.status == 400 and "at most 4 known speakers" in caught.value.message
