"""Neutral events: what the session core emits and every codec encodes its own way."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.types import Token, Transcript
from streaming.audio.decoder import AudioFormat
from streaming.commands import StreamOptions
from streaming.redaction.apply import Span
from streaming.words import Word, utterance_confidence, words_of


@dataclass(frozen=True, slots=True)
class Configured:
    """The stream's effective configuration (first at start, again after each change)."""

    session_id: str
    audio: AudioFormat
    options: StreamOptions
    model: str
    test_model: bool
    channel_labels: tuple[str, ...] = ()  # a multichannel stream's channels, by index
    stream_id: str = ""  # what subscribers follow it by
    webhook_url: str | None = None  # where its finals are POSTed, if anywhere
    demo_model: bool = False  # the demo model trained on synthetic speech

    @property
    def multichannel(self) -> bool:
        return bool(self.channel_labels)


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    utt_id: int
    start_ms: int
    channel: int | None = None  # in a multichannel stream: which channel


class StopCause(enum.Enum):
    VAD = "vad"  # the pause lasted
    COMMIT = "commit"  # the client ended the turn
    MAX_LENGTH = "max_length"  # a forced cut of long speech
    END_OF_STREAM = "end_of_stream"


@dataclass(frozen=True, slots=True)
class SpeechStopped:
    """An utterance closed; its final (or failure) follows."""

    utt_id: int
    start_ms: int
    end_ms: int
    cause: StopCause
    channel: int | None = None  # in a multichannel stream: which channel


@dataclass(frozen=True, slots=True)
class Partial:
    utt_id: int
    start_ms: int
    end_ms: int
    text: str
    stable_chars: int  # this many leading characters are sure to start the final
    tags: Mapping[str, str] = field(default_factory=dict)
    channel: int | None = None  # in a multichannel stream: which channel


@dataclass(frozen=True, slots=True)
class Final:
    utt_id: int
    start_ms: int
    end_ms: int
    transcript: Transcript
    show: Mapping[str, bool] = field(default_factory=dict)
    # Stream position when the VAD closed the utterance: decided_ms - end_ms is the VAD's
    # end-silence, and what follows it is engine and transport latency.
    decided_ms: int | None = None
    channel: int | None = None  # in a multichannel stream: which channel
    # What redaction took out of the transcript, each with its time (to bleep the audio).
    redactions: tuple[Span, ...] = ()
    # With diarization: who spoke most of it, and who spoke when (on the stream's clock;
    # more than one turn where the speaker changed within the utterance).
    speaker: str | None = None
    speaker_turns: tuple[SpeakerTurn, ...] = ()
    # How like that speaker's voice so far it was (cosine; 1.0 where it opened the speaker).
    speaker_score: float | None = None

    @property
    def words(self) -> tuple[Word, ...]:
        """The transcript's words, on the utterance's clock, with their confidence."""
        return words_of(self.transcript.tokens)

    @property
    def confidence(self) -> float | None:
        """How sure the model is of the whole final: its words' mean confidence (None
        when nothing was scored)."""
        return utterance_confidence(self.words)


@dataclass(frozen=True, slots=True)
class SpeakerTurn:
    """One speaker's stretch of an utterance, in ms on the stream's clock."""

    speaker: str
    start_ms: int
    end_ms: int


@dataclass(frozen=True, slots=True)
class Committed:
    """Text settled at a pause inside an utterance: the utterance's final starts with every
    `text` committed for it, joined in order (`text` carries the space that joins it on)."""

    utt_id: int
    start_ms: int  # the committed piece's audio, on the stream's clock
    end_ms: int
    text: str
    # The piece's tokens, on its own clock (the first carries the joining space), with
    # their log-probabilities when confidence was asked for (OpenAI Realtime's deltas).
    tokens: tuple[Token, ...] = ()
    channel: int | None = None  # in a multichannel stream: which channel


@dataclass(frozen=True, slots=True)
class Failed:
    """An utterance that could not be decoded; it takes its final's place in order."""

    utt_id: int
    start_ms: int
    end_ms: int
    code: str
    message: str
    channel: int | None = None  # in a multichannel stream: which channel


@dataclass(frozen=True, slots=True)
class Cleared:
    """The open utterance (if any) was dropped at the client's request."""

    utt_id: int | None
    channel: int | None = None  # in a multichannel stream: which channel


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """A client error, or the server refusing or dropping the session."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Marked:
    """The answer to a `Mark`, in order with the stream's other events."""

    token: str


@dataclass(frozen=True, slots=True)
class Ended:
    """Every owed final has been sent; the server closes next."""


@dataclass(frozen=True, slots=True)
class Acked:
    """The server has taken the stream's audio up to `samples` (frames at the client's
    rate, from the stream's start): a resuming client resends from no later than this.
    For the client alone (followers are not sent it)."""

    samples: int


@dataclass(frozen=True, slots=True)
class HandOff:
    """The server is going away: the client is asked to go on with the session on a new
    connection (AudioHook's `reconnect`), this one serving until it closes. For the client
    alone, and only for a codec that can say it (`HandsOff`)."""

    info: str = "the server is restarting: continue this session on a new connection"


@dataclass(frozen=True, slots=True)
class Resumed:
    """A dropped stream taken up on a new connection: the server has `samples` of its
    audio (the client resends from where it said it would, at most this), a fresh token
    for the next resume, and whether it has had the client's `stop` (then the client
    sends nothing more). For the client alone."""

    samples: int
    resume_token: str
    stopped: bool = False


SessionEvent = (
    Configured
    | SpeechStarted
    | SpeechStopped
    | Partial
    | Committed
    | Final
    | Failed
    | Cleared
    | ErrorEvent
    | Marked
    | Ended
    | Acked
    | Resumed
    | HandOff
)
