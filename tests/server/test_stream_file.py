"""scripts/stream_file.py against a real server: refusals, keys, outputs, the terminal view."""

from __future__ import annotations

import fcntl
import io
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from websockets.datastructures import Headers
from websockets.exceptions import InvalidStatus
from websockets.http11 import Response

from sensestream.client import refusal
from sensestream.stream.live import LiveView, display_width, live_line
from sensestream.stream.output import out_is_dir, plan_output
from tests.server.conftest import REPO, ServerProcess
from tests.server.conftest import STREAM_FILE_KEY as KEY

SCRIPT = [sys.executable, "scripts/stream_file.py"]
ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
LIVE_FINAL = re.compile(r"\[\d\d:\d\d:\d\d\.\d{3}\] ")


def env_without(*names: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in names}
    return {**env, **extra}


def run_script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SCRIPT, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=env if env is not None else env_without("SENSESTREAM_API_KEY"),
    )


def run_in_terminal(args: list[str], columns: int, timeout: float = 180) -> tuple[int, str]:
    """Run with stdout and stderr on one pseudo-terminal `columns` wide; all it printed."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = env_without("COLUMNS", "LINES", "SENSESTREAM_API_KEY")
    proc = subprocess.Popen(
        args, cwd=REPO, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    data, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 1.0)[0]:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the last writer closed the terminal
                break
            if not chunk:
                break
            data += chunk
        return proc.wait(timeout=10), data.decode("utf-8", "replace")
    finally:
        proc.kill()
        os.close(master)


def screen_rows(output: str) -> list[str]:
    """What stays on the screen: each row after its last carriage return, escapes removed."""
    rows = output.replace("\r\n", "\n").split("\n")
    return [ESCAPE.sub("", row.rsplit("\r", 1)[-1]) for row in rows]


def redraws(output: str) -> list[str]:
    """Every piece of text drawn from the start of a row, including overwritten ones."""
    pieces = re.split(r"\r\n|\r|\n", output)
    return [ESCAPE.sub("", piece) for piece in pieces if piece]


# --- refusals, keys and connection failures ----------------------------------------------


def test_refused_handshake_is_one_line_per_file_and_writes_nothing(
    keyed: ServerProcess, talk: Path, tmp_path: Path
) -> None:
    """Old: the first 401 killed the whole batch with an InvalidStatus traceback."""
    other = tmp_path / "other.wav"
    other.write_bytes(talk.read_bytes())
    out = tmp_path / "subs"
    run = run_script(
        str(talk), str(other), "--url", keyed.url, "--speed", "0", "--out", str(out),
        env=env_without("COLUMNS", SENSESTREAM_API_KEY="wrong-key-0123456789"),
    )  # fmt: skip
    assert run.returncode != 0
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    expected = (
        "error [unauthorized]: server refused the connection: 401 missing or wrong API key; "
        "the key given was refused: pass another with --api-key KEY or set SENSESTREAM_API_KEY"
    )
    assert sorted(lines) == sorted([f"{talk}: {expected}", f"{other}: {expected}"])
    assert run.stdout == ""
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_api_key_from_flag_or_environment_gives_finals(
    keyed: ServerProcess, talk: Path, how: str
) -> None:
    """Old: --api-key was an unknown option, and SENSESTREAM_API_KEY was never sent."""
    args = [str(talk), "--url", keyed.url, "--speed", "0", "--format", "jsonl"]
    if how == "flag":
        run = run_script(*args, "--api-key", KEY)
    else:
        run = run_script(*args, env=env_without("COLUMNS", SENSESTREAM_API_KEY=KEY))
    assert run.returncode == 0, run.stderr
    finals = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(finals) == 3
    assert all(f["type"] == "final" for f in finals)


def test_bad_url_and_unreachable_server_are_one_line_errors(talk: Path, tmp_path: Path) -> None:
    """Old: an http:// URL ended in an InvalidURI traceback."""
    for url, code in (("http://127.0.0.1:9/ws", "bad_url"), ("ws://127.0.0.1:9/ws", "connection")):
        run = run_script(str(talk), str(talk), "--url", url, "--out", str(tmp_path / code))
        assert run.returncode == 1
        assert "Traceback" not in run.stderr
        lines = run.stderr.splitlines()
        assert len(lines) == 2
        assert all(line.startswith(f"{talk}: error [{code}]: ") for line in lines)
        assert run.stdout == ""


def refused(status: int, body: bytes) -> InvalidStatus:
    return InvalidStatus(Response(status, "Reason", Headers(), body))


def test_refusal_names_the_status_and_the_servers_reason() -> None:
    """Old: there was no description of a refusal at all."""
    draining = refusal(refused(503, b"server is draining\n"))
    assert (draining.code, str(draining)) == (
        "unavailable",
        "server refused the connection: 503 server is draining",
    )
    assert draining.status == 503 and draining.reason == "server is draining"
    assert refusal(refused(403, b"origin not allowed\n")).code == "forbidden"
    other = refusal(refused(429, b""))
    assert (other.code, str(other)) == ("http_429", "server refused the connection: 429 Reason")


# --- outputs -----------------------------------------------------------------------------


def test_out_with_trailing_separator_is_a_directory_for_one_input(
    server: ServerProcess, talk: Path, tmp_path: Path
) -> None:
    """Old: `--out subs/` with one input wrote a file called `subs`."""
    out = tmp_path / "subs"
    run = run_script(
        str(talk), "--url", server.url, "--speed", "0", "--format", "srt", "--out", f"{out}/"
    )
    assert run.returncode == 0, run.stderr
    assert out.is_dir()
    assert [p.name for p in out.iterdir()] == ["talk.srt"]
    assert (out / "talk.srt").read_text(encoding="utf-8").startswith("1\n00:00:00")
    assert run.stdout == ""


def test_missing_file_says_no_such_file_and_the_other_is_written(
    server: ServerProcess, talk: Path, tmp_path: Path
) -> None:
    """Old: libsndfile's "System error", and an empty missing.txt beside talk.txt."""
    missing = tmp_path / "missing.wav"
    out = tmp_path / "out"
    run = run_script(
        str(missing), str(talk), "--url", server.url, "--speed", "0", "--out", str(out)
    )
    assert run.returncode == 1
    assert run.stderr.splitlines() == [f"{missing}: error [not_found]: no such file"]
    assert [p.name for p in out.iterdir()] == ["talk.txt"]
    assert len((out / "talk.txt").read_text(encoding="utf-8").splitlines()) == 3


def test_failed_single_input_leaves_no_output_file(talk: Path, tmp_path: Path) -> None:
    """Old: an empty out.txt was written for an input whose stream failed."""
    for name, source in (("unreachable", talk), ("missing", tmp_path / "missing.wav")):
        out = tmp_path / f"{name}.txt"
        run = run_script(str(source), "--url", "ws://127.0.0.1:9/ws", "--out", str(out))
        assert not out.exists()
        assert run.returncode == 1
        assert len(run.stderr.splitlines()) == 1, run.stderr
    assert list(tmp_path.iterdir()) == []


def test_out_rule() -> None:
    """Old: there was no rule; a directory was whatever already existed."""
    assert out_is_dir("subs/", 1)
    assert out_is_dir("subs", 2)
    assert out_is_dir(str(REPO / "scripts"), 1)
    assert not out_is_dir("talk.srt", 1)


# --- the terminal -------------------------------------------------------------------------


def test_display_width_counts_wide_characters_twice() -> None:
    """Old: there was no width function; text[-100:] cut by characters."""
    width = display_width
    assert width("hello") == 5
    assert width("今天天气") == 8
    assert width("ｗｉｄｅ") == 8  # fullwidth forms
    assert width("e\u0301") == 1  # a combining accent takes no column
    assert width("") == 0


def test_live_line_keeps_the_end_within_the_terminal() -> None:
    width = display_width
    text = "hello 今天天气很好，我们去公园散步吧。"
    for columns in range(4, 60):
        line = live_line(text, columns)
        assert line.startswith("… ")
        assert width(line) <= columns - 1
        assert text.endswith(line[2:])
    assert live_line(text, 80) == f"… {text}"
    # Eleven columns: room for four wide characters after "… ", never half of one.
    assert live_line("今天天气很好", 11) == "… 天气很好"
    assert live_line("a\nb\x1b[2Jc", 80) == "… a b[2Jc"
    assert live_line(text, 3) == ""


def test_output_plan_shows_each_final_once_in_a_terminal() -> None:
    """Old: finals went to stderr live and to stdout again, both on the terminal."""
    plan = plan_output
    text_tty = plan(1, None, "text", stderr_tty=True, stdout_same_tty=True)
    assert (text_tty.live, text_tty.live_finals, text_tty.stdout) == (True, True, False)
    srt_tty = plan(1, None, "srt", stderr_tty=True, stdout_same_tty=True)
    assert (srt_tty.live, srt_tty.live_finals, srt_tty.stdout) == (True, False, True)
    piped = plan(1, None, "text", stderr_tty=True, stdout_same_tty=False)
    assert (piped.live, piped.live_finals, piped.stdout) == (True, True, True)
    batch = plan(2, None, "text", stderr_tty=True, stdout_same_tty=True)
    assert (batch.live, batch.stdout) == (False, True)
    to_file = plan(1, "x.txt", "text", stderr_tty=True, stdout_same_tty=True)
    assert (to_file.live_finals, to_file.stdout, to_file.out_file) == (True, False, Path("x.txt"))


@pytest.mark.parametrize("fmt", ["text", "srt"])
def test_terminal_shows_each_final_once_and_partials_never_wrap(
    server: ServerProcess, talk: Path, fmt: str
) -> None:
    """Old: each final appeared twice, and partials up to 102 columns wrapped a 32-column line."""
    columns = 32
    # Four times real time (a replay) still gives partials, and is quick.
    args = [*SCRIPT, str(talk), "--url", server.url, "--speed", "4", "--format", fmt]
    rc, output = run_in_terminal(args, columns)
    assert rc == 0, output
    rows = screen_rows(output)
    stamped = [row.split("] ", 1)[1] for row in rows if LIVE_FINAL.match(row)]
    cues = [rows[i + 1] for i, row in enumerate(rows[:-1]) if " --> " in row]
    # As text the live view is the output; as srt stdout is, and the view shows partials only.
    texts = stamped if fmt == "text" else cues
    assert len(texts) == 3, rows
    assert (stamped, cues) == ((texts, []) if fmt == "text" else ([], texts))
    for text in texts:
        assert sum(row.endswith(text) for row in rows) == 1, rows
    partials = [p for p in redraws(output) if p.startswith("… ")]
    assert partials, output
    assert max(display_width(p) for p in partials) <= columns - 1
    assert not any(row.startswith("… ") for row in rows)  # the last partial was cleared


def test_live_view_falls_back_to_columns_and_prints_finals_on_their_own_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a terminal size on its stream the view uses $COLUMNS (shutil's answer)."""

    class Recorder(io.StringIO):
        def fileno(self) -> int:
            raise OSError("not a terminal")

    monkeypatch.setenv("COLUMNS", "20")
    screen = Recorder()
    view = LiveView(screen, show_finals=True)
    view.partial("欢迎使用实时语音识别服务" * 3)
    view.final({"start_ms": 1500, "text": "done"})
    first, final = redraws(screen.getvalue())
    # 20 columns less the free last one and "… " leave 17: eight wide characters.
    assert first == "… 实时语音识别服务"
    assert final == "[00:00:01.500] done"
