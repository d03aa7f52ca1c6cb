"""MPEG audio (mp3) uploads, decoded in a child process so libmpg123's chatter stays out
of the server's stderr.

libsndfile decodes mp3 with a bundled libmpg123 that prints each flaw of a damaged stream
(`[src/libmpg123/layer3.c:…] error: part2_3_length … too large`, `Note: Illegal
Audio-MPEG-Header …`) to the process's stderr from C. Neither libsndfile nor soundfile
can turn that off (libsndfile never sets MPG123_QUIET: libsndfile/libsndfile#958), and
the bundled copy exports no mpg123 symbol to set it through. Pointing fd 2 elsewhere
around a decode would take every other thread's stderr with it, so the decode runs in a
child whose stderr is a pipe, read here and logged at DEBUG.

Run as a script, this module is that child; it imports nothing of the project, so it
needs only the interpreter's own packages (numpy, soundfile).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import weakref
from typing import IO

import numpy as np
import soundfile as sf

log = logging.getLogger("sensestream.transcriptions")

# The child's stdout: records of a tag, a payload length and the payload.
INFO, AUDIO, ERROR, END = b"I", b"A", b"E", b"Z"
RECORD = struct.Struct("<cI")
BLOCK_FRAMES = 16384  # frames per AUDIO record
SPOOL_BYTES = 1 << 20  # the child keeps an upload this small in memory, a larger one on disk
OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>")


class DecodeError(Exception):
    """The child could not decode the file; the message is the reason."""


def is_mpeg(head: bytes) -> bool:
    """An ID3 tag or an MPEG audio frame sync first: libsndfile would hand it to libmpg123."""
    return head.startswith(b"ID3") or (len(head) >= 2 and head[0] == 0xFF and head[1] >= 0xE0)


def reason(exc: Exception) -> str:
    """What went wrong, in libsndfile's words, without the repr of a file object."""
    if isinstance(exc, sf.LibsndfileError):
        text = exc.error_string
    else:
        text = OBJECT_REPR.sub("the file", str(exc))
    text = text.strip().rstrip(".")
    return text[:1].lower() + text[1:] if text else type(exc).__name__


class ChildDecoder:
    """The part of `soundfile.SoundFile` that `FileAudio` uses, decoded by a child process.

    Raises DecodeError for a file the child cannot open, OSError if none can start.
    """

    def __init__(self, file: IO[bytes], label: str) -> None:
        self.closed = False
        self._ended = False
        self._proc = subprocess.Popen(
            # -P: the script's folder (this package) stays off the child's sys.path.
            [sys.executable, "-P", __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        stdin, self._stdout, stderr = pipes(self._proc)
        # A decoder dropped unclosed (its upload abandoned mid-open) still ends its child.
        self._stop = weakref.finalize(self, stop_child, self._proc)
        # Drained all along: a child blocked on a full stderr pipe would stall the decode.
        chatter = threading.Thread(
            target=log_chatter, args=(stderr, label), name="mp3-chatter", daemon=True
        )
        chatter.start()
        try:
            info = self._start(file, stdin)
        except BaseException:
            self.close()
            raise
        self.samplerate = int(info["samplerate"])
        self.channels = int(info["channels"])
        self.frames = int(info["frames"])
        self._pending = np.zeros((0, self.channels), np.float32)

    def _start(self, file: IO[bytes], stdin: IO[bytes]) -> dict[str, int]:
        """Hand the child the whole file; its header (rate, channels, length)."""
        try:
            with stdin:
                shutil.copyfileobj(file, stdin)
        except BrokenPipeError:
            pass  # the child is gone: its records (or their absence) say why
        kind, payload = self._record()
        if kind != INFO:
            raise DecodeError(payload.decode("utf-8", "replace") or "the decoder stopped")
        info: dict[str, int] = json.loads(payload)
        return info

    def read(self, frames: int, dtype: str = "float32", always_2d: bool = True) -> np.ndarray:
        """Up to `frames` float32 frames, (frames, channels); none at the end."""
        while len(self._pending) < frames and not self._ended:
            kind, payload = self._record()
            if kind == AUDIO:
                block = np.frombuffer(payload, np.float32).reshape(-1, self.channels)
                self._pending = np.concatenate([self._pending, block])
            elif kind == END:
                self._ended = True
            else:
                raise DecodeError(payload.decode("utf-8", "replace") or "the decoder stopped")
        block, self._pending = self._pending[:frames], self._pending[frames:]
        return block

    def _record(self) -> tuple[bytes, bytes]:
        head = self._stdout.read(RECORD.size)
        if len(head) < RECORD.size:
            return ERROR, b"the decoder stopped before the end"
        kind, size = RECORD.unpack(head)
        payload = self._stdout.read(size)
        if len(payload) < size:
            return ERROR, b"the decoder stopped before the end"
        return kind, payload

    def close(self) -> None:
        """Stop the child (at once: nothing it still has is wanted); safe to repeat."""
        self.closed = True
        self._stop()


def pipes(proc: subprocess.Popen[bytes]) -> tuple[IO[bytes], IO[bytes], IO[bytes]]:
    """The child's stdin, stdout and stderr (all three are pipes)."""
    if proc.stdin is None or proc.stdout is None or proc.stderr is None:
        raise OSError("the decoder process has no pipes")
    return proc.stdin, proc.stdout, proc.stderr


def stop_child(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def log_chatter(stream: IO[bytes], label: str) -> None:
    """The child's stderr (libmpg123's notes on a damaged stream), at DEBUG."""
    with stream:
        for line in stream:
            log.debug("mp3 decoder, %s: %s", label, line.decode("utf-8", "replace").rstrip())


def child_main() -> int:
    """The child: the file from stdin, its decoded frames as records on stdout."""
    out = sys.stdout.buffer
    try:
        with tempfile.SpooledTemporaryFile(SPOOL_BYTES) as data:
            shutil.copyfileobj(sys.stdin.buffer, data)
            data.seek(0)
            decode(data, out)
        send(out, END, b"")
        out.flush()
    except BrokenPipeError:
        pass  # the server closed the upload (a client gone): nobody wants the rest
    return 0


def decode(data: IO[bytes], out: IO[bytes]) -> None:
    try:
        with sf.SoundFile(data) as audio:
            info = {"samplerate": audio.samplerate, "channels": audio.channels}
            send(out, INFO, json.dumps({**info, "frames": audio.frames}).encode())
            while len(block := audio.read(BLOCK_FRAMES, "float32", always_2d=True)):
                send(out, AUDIO, block.tobytes())
    except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
        send(out, ERROR, reason(exc).encode())


def send(out: IO[bytes], kind: bytes, payload: bytes) -> None:
    out.write(RECORD.pack(kind, len(payload)))
    out.write(payload)


if __name__ == "__main__":
    sys.exit(child_main())
