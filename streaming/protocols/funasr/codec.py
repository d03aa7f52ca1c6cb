"""The FunASR runtime WebSocket protocol, as its C++ 2pass server speaks it (`/funasr`).

JSON text frames configure the stream and end it; binary frames carry 16-bit PCM (raw, or
a WAV file whose header is stripped here). Results are JSON text frames with `mode`,
`text`, `wav_name` and `is_final`. The mode strings of results are always the 2pass
server's (`2pass-online` for new partial text, `2pass-offline` for an utterance's final),
whatever mode the client asked for: funasr-client merges only `2pass-offline` results, so
the offline server's `offline` string would leave its file transcripts empty.

Online text only ever appends. In `online` mode nothing later replaces it, so it carries
only text the final is sure to keep: text committed at the pauses inside an utterance
(`commit: "pauses"`), else each utterance's text when it ends. In `2pass` mode the
utterance's `2pass-offline` result replaces its online text on the client, so without
commits provisional text goes out as it appears: the part two partials in a row agree on.
With commits it carries committed text alone, as in `online` mode: a provisional guess that
a commit then disagreed with could not be taken back, and every later commit of the
utterance would have to wait for the offline result.

The last message is the end-of-input acknowledgement as upstream's Python server sends
it: the client's own mode, empty text, `is_end: true`, and `is_final: true` unless
something failed (then `is_final: false` and an `error` string). Older clients only look
for that `is_final: true`; upstream's current client waits for `is_end`. One connection
carries one stream; after the acknowledgement the client closes, and the server closes
only once the session's idle timeout has passed without that.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from streaming.audio.decoder import AudioFormat
from streaming.commands import Audio, Command, Configure, Stop
from streaming.errors import FrameTooLargeError, ProtocolError, StateError
from streaming.events import (
    Committed,
    Configured,
    Ended,
    ErrorEvent,
    Failed,
    Final,
    Partial,
    SessionEvent,
)
from streaming.limits import SessionLimits
from streaming.protocols.base import Frame
from streaming.protocols.funasr.config import FunasrConfig, read_message
from streaming.protocols.funasr.stamps import stamp_fields
from streaming.protocols.funasr.wav import WavInfo, WavStripper
from streaming.protocols.json_text import load_object

#: Hotword lists can be long, so text frames may be larger than protocol v1's.
MAX_TEXT_BYTES = 64 * 1024
ONLINE = "2pass-online"
OFFLINE = "2pass-offline"
ONE_STREAM = (
    "the input has ended: this server takes one stream per connection; "
    "open a new connection for the next one"
)


def common_prefix(a: str, b: str) -> int:
    """How many leading characters `a` and `b` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class FunasrCodec:
    """The FunASR protocol for one connection: config text, PCM or WAV audio, results."""

    def __init__(self, limits: SessionLimits) -> None:
        self._limits = limits
        self._config = FunasrConfig()
        self._sent_config: Configure | None = None  # the last Configure given to the session
        self._wav: WavStripper | None = None  # made by the first audio frame
        self._header: WavInfo | None = None
        self._stopped = False
        self._online_sent: dict[int, str] = {}  # utterance -> its text sent as 2pass-online
        self._committed_text: dict[int, str] = {}  # utterance -> its text committed so far
        self._last_partial: dict[int, str] = {}  # utterance -> its latest partial's text
        self._errors: list[str] = []  # what failed, for the acknowledgement
        self._commits = False  # whether the session commits text at pauses (`Configured`)

    @property
    def max_message_bytes(self) -> int:
        # A hard cap for the library; the limits below answer with an error message first.
        return 4 * max(self._limits.max_frame_bytes, MAX_TEXT_BYTES)

    @property
    def end_grace_s(self) -> float:
        """How long, after the acknowledgement, the client may take to close first.

        FunASR's servers never close first: their clients close after the acknowledgement
        (funasr-client sends one more end marker before, and fails if the server has
        closed). So the server waits as long as it waits for any client message.
        """
        return self._limits.idle_timeout_s

    def opening(self) -> Sequence[Command]:
        return ()

    def decode(self, message: Frame) -> Sequence[Command]:
        if isinstance(message, bytes):
            return self._audio(message)
        size = len(message) if len(message) > MAX_TEXT_BYTES else len(message.encode())
        if size > MAX_TEXT_BYTES:
            raise FrameTooLargeError(
                f"text frame of {size} bytes is over the {MAX_TEXT_BYTES} byte limit"
            )
        return self._text(message)

    def encode(self, event: SessionEvent) -> Sequence[Frame]:
        match event:
            case Configured():
                self._commits = event.options.commit == "pauses"
            case Partial():
                return self._online(event)
            case Committed():
                return self._committed(event)
            case Final():
                return self._final(event)
            case Failed():
                self._forget(event.utt_id)
                times = {"start_ms": event.start_ms, "end_ms": event.end_ms}
                return (self._error(event.code, event.message, times),)
            case ErrorEvent():
                return (self._error(event.code, event.message, {}),)
            case Ended():
                return (self._acknowledgement(),)
        return ()

    def is_fatal(self, error: ProtocolError) -> bool:
        # The reference servers have no error messages; a stream that went wrong ends, with
        # the finals it is owed, rather than going on with results that may be wrong.
        return True

    def close_code(self, error: ProtocolError) -> int:
        return error.close_code

    # ---- decoding -----------------------------------------------------------------

    def _text(self, message: str) -> list[Command]:
        obj = load_object(message)
        name = obj.get("wav_name")
        if isinstance(name, str) and not self._stopped:
            # Taken first, so an error about the rest of the message still names the stream.
            self._config = replace(self._config, wav_name=name)
        parsed = read_message(obj)
        if self._stopped:
            if parsed.end:
                return []  # clients repeat the end marker (funasr-client on close): harmless
            raise StateError(ONE_STREAM)
        config = replace(self._config, **parsed.changes)
        audio_keys = (config.audio_fs, config.wav_format)
        if self._wav is not None and audio_keys != (self._config.audio_fs, self._config.wav_format):
            raise StateError("audio_fs and wav_format cannot change once audio has been sent")
        self._config = config
        commands = self._configure()
        if parsed.end:
            commands += self._end()
        return commands

    def _audio(self, data: bytes) -> list[Command]:
        self._limits.check_frame(len(data), binary=True)
        if self._stopped:
            raise StateError(ONE_STREAM)
        if self._wav is None:
            # The html5 client sends whole .wav files as "PCM": sniff for a header either way.
            self._wav = WavStripper(required=self._config.wav_format == "wav")
        header, audio = self._wav.feed(data)
        if header is not None:
            self._header = header
        commands = self._configure()
        if audio:
            commands.append(Audio(audio))
        return commands

    def _end(self) -> list[Command]:
        self._stopped = True
        tail = self._wav.finish() if self._wav is not None else b""
        return [Audio(tail), Stop()] if tail else [Stop()]

    def _configure(self) -> list[Command]:
        """A Configure for the session when the format or options changed (or at first)."""
        header = self._header
        if header is not None:
            fmt = AudioFormat("pcm_s16le", header.sample_rate, header.channels)
        else:
            fmt = AudioFormat("pcm_s16le", self._config.audio_fs, 1)
        command = Configure(fmt, self._config.options())
        if command == self._sent_config:
            return []
        self._sent_config = command
        return [command]

    # ---- encoding -----------------------------------------------------------------

    def _online(self, partial: Partial) -> Sequence[Frame]:
        """New text as a 2pass-online increment (clients append every increment)."""
        if self._config.mode == "offline":
            return ()
        settled = partial.text[: self._take_partial(partial)]
        sent = self._online_sent.get(partial.utt_id, "")
        # Only growth is sent: text once sent cannot be taken back.
        if len(settled) <= len(sent) or not settled.startswith(sent):
            return ()
        self._online_sent[partial.utt_id] = settled
        return (self._message(ONLINE, settled[len(sent) :]),)

    def _committed(self, event: Committed) -> Sequence[Frame]:
        """Text committed at a pause goes out as online text at once (the final keeps it)."""
        if self._config.mode == "offline":
            return ()
        total = self._committed_text.get(event.utt_id, "") + event.text
        self._committed_text[event.utt_id] = total
        sent = self._online_sent.get(event.utt_id, "")
        if len(total) <= len(sent) or not total.startswith(sent):
            return ()  # a 2pass client was sent other provisional text: its offline replaces it
        self._online_sent[event.utt_id] = total
        return (self._message(ONLINE, total[len(sent) :]),)

    def _take_partial(self, partial: Partial) -> int:
        """How much of a partial may go out as online text in the client's mode (in 2pass
        mode the partial is kept, to compare the next one with)."""
        if self._config.mode == "online" or self._commits:
            # Nothing replaces an online client's text: only what the final is sure to keep.
            # With commits, that is what a 2pass client gets too (see the module's notes).
            return partial.stable_chars
        # A 2pass client replaces an utterance's online text with its 2pass-offline result,
        # as upstream's own online pass is replaced, so provisional text may go out: the part
        # two partials in a row agree on.
        previous = self._last_partial.get(partial.utt_id, "")
        self._last_partial[partial.utt_id] = partial.text
        return max(partial.stable_chars, common_prefix(previous, partial.text))

    def _forget(self, utt_id: int) -> str:
        """Drop an ended utterance's online state; returns the online text it was sent."""
        self._last_partial.pop(utt_id, None)
        self._committed_text.pop(utt_id, None)
        return self._online_sent.pop(utt_id, "")

    def _final(self, final: Final) -> Sequence[Frame]:
        sent = self._forget(final.utt_id)
        text = final.transcript.text
        if self._config.mode != "online":
            return (self._message(OFFLINE, text, **_final_fields(final)),)
        # Online clients see only increments: send what the final adds to the text already
        # sent (a prefix of it, as partials promise; were it not, no word would be lost).
        rest = text[common_prefix(sent, text) :]
        return (self._message(ONLINE, rest),) if rest else ()

    def _error(self, code: str, message: str, extra: dict[str, Any]) -> str:
        self._errors.append(f"{code}: {message}")
        return self._message(OFFLINE, "", error={"code": code, "message": message}, **extra)

    def _acknowledgement(self) -> str:
        """The end of input, in the client's mode (an online client's screen keeps its text)."""
        failed = {"error": "; ".join(self._errors)} if self._errors else {}
        return self._message(
            self._config.mode, "", is_final=not self._errors, is_end=True, **failed
        )

    def _message(self, mode: str, text: str, *, is_final: bool = False, **extra: Any) -> str:
        obj: dict[str, Any] = {"mode": mode, "text": text, "wav_name": self._config.wav_name}
        obj.update(is_final=is_final, **extra)
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _final_fields(final: Final) -> dict[str, Any]:
    """What a 2pass-offline result adds to the text: times, tags, timestamps, and (with
    the server's `--diarize`) who spoke, as FunASR's own server says it."""
    t = final.transcript
    out: dict[str, Any] = {"start_ms": final.start_ms, "end_ms": final.end_ms, "lang": t.lang}
    if final.speaker is not None:
        out["spk_name"] = final.speaker
        if final.speaker_score is not None:
            out["spk_score"] = round(final.speaker_score, 4)
    if final.show.get("emotion", True):
        out["emotion"] = t.emotion
    if final.show.get("event", True):
        out["event"] = t.event
    if final.show.get("timestamps", True):
        # Token times are on the utterance's clock; FunASR's are on the stream's.
        out.update(stamp_fields(t.tokens, final.start_ms))
    return out
