"""stream_file.py's hints (issue 38): a wrong endpoint, a missing key, and --multichannel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from sensestream.client import (
    FUNASR,
    OPENAI_REALTIME,
    RefusedError,
    foreign_protocol,
    v1_url,
)
from sensestream.stream.live import display_width, live_line
from sensestream.stream.output import StreamResult, render
from tests.server.conftest import REPO, ServerProcess
from tests.server.conftest import STREAM_FILE_KEY as KEY
from tests.speech import Clip
from tools.speech import noise_floor

SCRIPT = [sys.executable, "scripts/stream_file.py"]
#: The wrong endpoint must be named well within this (the whole process, start-up included).
HINT_WITHIN_S = 2.0
SR = 16000


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


@pytest.fixture(scope="module")
def call(speech_clips: list[Clip], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Stereo: a sentence on the left (0.5 s in), a different one on the right (5 s in)."""
    agent, customer = speech_clips[0].audio, speech_clips[1].audio
    n = 5 * SR + len(customer) + 2 * SR
    left, right = np.zeros(n, np.float32), np.zeros(n, np.float32)
    left[SR // 2 : SR // 2 + len(agent)] = agent
    right[5 * SR : 5 * SR + len(customer)] = customer
    stereo = np.stack([left + noise_floor(n, seed=1), right + noise_floor(n, seed=2)], axis=1)
    path = tmp_path_factory.mktemp("hints") / "call.wav"
    sf.write(path, stereo, SR, subtype="PCM_16")
    return path


def run_script(*args: str, key: str | None = None, command: list[str] = SCRIPT) -> Run:
    env = {k: v for k, v in os.environ.items() if k not in ("SENSESTREAM_API_KEY", "COLUMNS")}
    if key is not None:
        env["SENSESTREAM_API_KEY"] = key
    began = time.monotonic()
    done = subprocess.run(
        [*command, *args],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    return Run(done.returncode, done.stdout, done.stderr, time.monotonic() - began)


# --- the wrong endpoint ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "protocol"),
    [("/funasr", FUNASR), ("", FUNASR), ("/v1/realtime", OPENAI_REALTIME)],
    ids=["funasr", "root", "realtime"],
)
@pytest.mark.parametrize("speed", ["0", "1"])
def test_another_protocols_endpoint_is_named_at_once_with_the_v1_url(
    keyed: ServerProcess, talk: Path, path: str, protocol: str, speed: str
) -> None:
    """Old: 30 s, then six `bad_message` lines (FunASR) or 33 `error [None]: None` (OpenAI)."""
    base = f"ws://127.0.0.1:{keyed.port}"
    run = run_script(str(talk), "--url", base + path, "--speed", speed, key=KEY)
    print(f"{path or '/'} at speed {speed}: exit {run.returncode} in {run.seconds:.2f} s")
    assert run.returncode == 1
    expected = f"{talk}: error [wrong_endpoint]: this URL speaks {protocol}: use {base}/ws"
    assert run.stderr.splitlines() == [expected]
    assert run.stdout == ""
    assert run.seconds < HINT_WITHIN_S


def test_the_sensestream_command_names_the_wrong_endpoint_too(
    keyed: ServerProcess, talk: Path
) -> None:
    url = f"ws://127.0.0.1:{keyed.port}/v1/realtime?token={KEY}"
    command = [sys.executable, "-m", "sensestream", "stream"]
    run = run_script(str(talk), "--url", url, "--speed", "0", command=command)
    assert run.returncode == 1
    # The suggestion leaves the query out: it may carry the key.
    suggestion = f"use ws://127.0.0.1:{keyed.port}/ws"
    assert run.stderr.splitlines() == [f"{talk}: error [wrong_endpoint]: this URL speaks "
                                       f"{OPENAI_REALTIME}: {suggestion}"]  # fmt: skip
    assert run.seconds < HINT_WITHIN_S


def test_foreign_messages_are_told_apart_from_v1_events() -> None:
    funasr = {"mode": "2pass-online", "text": "w1", "wav_name": "wav-default-id", "is_final": False}
    assert foreign_protocol(funasr) == FUNASR
    assert (
        foreign_protocol({"mode": "2pass", "text": "", "is_final": True, "is_end": True}) == FUNASR
    )
    created = {"type": "session.created", "event_id": "event_1_0", "session": {}}
    assert foreign_protocol(created) == OPENAI_REALTIME
    assert foreign_protocol({"type": "transcription_session.created"}) == OPENAI_REALTIME
    openai_error = {"type": "error", "error": {"type": "invalid_request_error", "code": "x"}}
    assert foreign_protocol(openai_error) == OPENAI_REALTIME
    for v1 in (
        {"v": 1, "type": "final", "text": "w"},
        {"v": 1, "type": "error", "code": "bad_audio", "message": "odd"},
        {"type": "error", "code": "bad_audio", "message": "odd"},  # a v1 error without `v`
        {"type": "partial", "text": "w"},
        [1, 2],
        "text",
    ):
        assert foreign_protocol(v1) is None, v1
    assert v1_url("wss://asr.example:9000/funasr?token=k#x") == "wss://asr.example:9000/ws"
    assert v1_url("ws://[::1]:8765") == "ws://[::1]:8765/ws"


# --- keys --------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, "wrong-key-0123456789"], ids=["no-key", "wrong-key"])
def test_a_refused_key_says_how_to_pass_one(
    keyed: ServerProcess, talk: Path, key: str | None
) -> None:
    """Old: `401 missing or wrong API key` and nothing on what to do about it."""
    run = run_script(str(talk), "--url", keyed.url, "--speed", "0", key=key)
    assert run.returncode == 1
    [line] = run.stderr.splitlines()
    assert line.startswith(f"{talk}: error [unauthorized]: server refused the connection: 401 ")
    assert "--api-key KEY" in line and "SENSESTREAM_API_KEY" in line


def test_only_a_refusal_about_the_key_gets_the_key_hint() -> None:
    assert RefusedError(401, "missing or wrong API key").about_key
    assert RefusedError(403, "invalid API key").about_key
    assert not RefusedError(403, "origin not allowed").about_key
    assert not RefusedError(503, "server is starting").about_key


# --- multichannel ------------------------------------------------------------------------


def labelled_finals(run: Run) -> list[dict[str, Any]]:
    assert run.returncode == 0, run.stderr
    return [json.loads(line) for line in run.stdout.splitlines()]


def test_multichannel_gives_one_labelled_transcript_per_channel(
    keyed: ServerProcess, call: Path
) -> None:
    """Old: --multichannel was an unknown option; the call was mixed into one transcript."""
    args = [str(call), "--url", keyed.url, "--speed", "0", "--multichannel"]
    finals = labelled_finals(
        run_script(*args, "--channel-labels", "agent,customer", "--format", "jsonl", key=KEY)
    )
    by_label = {
        label: [f for f in finals if f["label"] == label] for label in ("agent", "customer")
    }
    assert len(finals) == sum(len(f) for f in by_label.values())  # every final is labelled
    assert by_label["agent"] and by_label["customer"]
    assert {f["channel"] for f in by_label["agent"]} == {0}
    assert {f["channel"] for f in by_label["customer"]} == {1}
    # Unmixed: each channel's finals lie where its own speech is (left 0.5 s in, right 5 s in).
    assert all(f["end_ms"] < 5000 for f in by_label["agent"])
    assert all(f["start_ms"] >= 4500 for f in by_label["customer"])
    spoken = {label: sum(1 for f in of if f["text"]) for label, of in by_label.items()}
    assert spoken["agent"] and spoken["customer"]
    text = run_script(*args, "--channel-labels", "agent,customer", key=KEY)
    assert text.returncode == 0, text.stderr
    tags = [line.split(" ", 1)[0] for line in text.stdout.splitlines()]
    assert sorted(tags) == ["[agent]"] * spoken["agent"] + ["[customer]"] * spoken["customer"]
    srt = run_script(*args, "--channel-labels", "agent,customer", "--format", "srt", key=KEY)
    assert srt.returncode == 0, srt.stderr
    cues = [cue.splitlines() for cue in srt.stdout.strip().split("\n\n")]
    # Cues go by their start: the agent speaks first.
    assert [cue[2].split(" ", 1)[0] for cue in cues] == tags
    # Without labels the channels carry the protocol's own names, "0" and "1".
    plain = labelled_finals(run_script(*args, "--format", "jsonl", key=KEY))
    assert {str(f["label"]) for f in plain} == {"0", "1"}


def test_multichannel_refuses_a_mono_file_or_a_wrong_label_count(
    keyed: ServerProcess, talk: Path, call: Path
) -> None:
    """Old: --multichannel was an unknown option."""
    mono = run_script(str(talk), "--url", keyed.url, "--multichannel", key=KEY)
    assert mono.returncode == 1
    assert mono.stderr.splitlines() == [
        f"{talk}: error [channel_count]: --multichannel needs a file of two or more channels; "
        "this one is mono"
    ]
    three = run_script(
        str(call), "--url", keyed.url, "--multichannel", "--channel-labels", "a,b,c", key=KEY
    )
    assert three.returncode == 1
    assert three.stderr.splitlines() == [
        f"{call}: error [channel_count]: 3 channel labels for a file of 2 channels: give one each"
    ]
    assert mono.stdout == three.stdout == ""
    for bad, why in (
        (["--channel-labels", "a,b"], "--channel-labels needs --multichannel"),
        (["--multichannel", "--channel-labels", "a,a"], "distinct, non-empty"),
    ):
        usage = run_script(str(call), "--url", keyed.url, *bad)
        assert usage.returncode == 2 and why in usage.stderr


def test_without_multichannel_a_stereo_file_is_still_mixed(
    keyed: ServerProcess, call: Path
) -> None:
    finals = labelled_finals(
        run_script(str(call), "--url", keyed.url, "--speed", "0", "--format", "jsonl", key=KEY)
    )
    assert finals and not any("label" in f or "channel" in f for f in finals)


def test_vtt_and_text_tag_each_cue_with_its_channel() -> None:
    result = StreamResult(Path("call.wav"))
    result.finals = [
        {"start_ms": 3000, "end_ms": 4000, "text": "later", "channel": 1, "label": "customer"},
        {"start_ms": 500, "end_ms": 1500, "text": "first", "channel": 0, "label": "agent"},
    ]
    assert render(result, "text") == "[customer] later\n[agent] first\n"
    assert render(result, "vtt") == (
        "WEBVTT\n\n00:00:00.500 --> 00:00:01.500\n[agent] first\n\n"
        "00:00:03.000 --> 00:00:04.000\n[customer] later\n"
    )


def test_the_live_line_keeps_the_channel_tag_in_front() -> None:
    text = "hello 今天天气很好，我们去公园散步吧。"
    for columns in range(12, 60):
        line = live_line(text, columns, "[agent] ")
        assert line.startswith("… [agent] ") and display_width(line) <= columns - 1
        assert text.endswith(line[len("… [agent] ") :])
    # Too narrow for the tag and some text: the text alone.
    assert live_line(text, 11, "[agent] ") == live_line(text, 11)
