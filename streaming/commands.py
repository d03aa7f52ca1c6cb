"""Neutral commands: what every wire protocol's codec turns its client messages into.

The session core takes only these; a protocol adds a codec, never session logic.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from engine.types import (
    DEFAULT_HOTWORD_BOOST,
    LANGUAGES,
    MAX_HOTWORD_BOOST,
    MAX_HOTWORDS,
    Hotword,
)
from streaming.audio.decoder import AudioFormat
from streaming.errors import InvalidFieldError
from streaming.pieces.policy import COMMIT_MODES
from streaming.redaction.policies import Redaction
from streaming.speakers.online import MAX_SPEAKERS

#: Languages a client may ask for (nospeech is a model prompt, not a language).
CLIENT_LANGUAGES = LANGUAGES[:-1]
PACES = ("live", "replay")
#: What a client-named stream id may hold: ids travel in URL paths (/v1/streams/{id}).
STREAM_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
WEBHOOK_SCHEMES = ("http://", "https://")


@dataclass(frozen=True, slots=True)
class TurnDetection:
    """How utterances end: the server's VAD (with optional overrides), or client commits."""

    vad: bool = True
    end_silence_ms: int | None = None  # None: the server's setting
    preroll_ms: int | None = None

    def __post_init__(self) -> None:
        if self.end_silence_ms is not None and not 50 <= self.end_silence_ms <= 10_000:
            raise InvalidFieldError("silence duration must be within 50..10000 ms")
        if self.preroll_ms is not None and not 0 <= self.preroll_ms <= 2000:
            raise InvalidFieldError("prefix padding must be within 0..2000 ms")


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """Decoding and reporting choices a client may make for its stream."""

    language: str = "auto"
    itn: bool = True
    partials: bool = True
    emotion: bool = True
    event: bool = True
    timestamps: bool = True
    pace: str = "live"  # a live client is held to real time; a replay may go much faster
    turns: TurnDetection = field(default_factory=TurnDetection)
    # Phrases decoding favours (a context graph over a CTC beam search); none: greedy.
    hotwords: tuple[Hotword, ...] = ()
    prompt: str = ""  # reported back; free text is not a hotword list
    # What is redacted from the stream's text (on top of the server's `--redact`).
    redact: Redaction = field(default_factory=Redaction)
    # Text committed at the pauses inside an utterance ("pauses") or only at its end
    # ("off"); None: the server's choice (`streaming.pieces.policy`).
    commit: str | None = None
    # Label who spoke (streaming.speakers): None, the server's choice. `max_speakers`
    # caps how many speakers are told apart (None: no cap).
    diarize: bool | None = None
    max_speakers: int | None = None
    # At least this many speakers: used where a recording is clustered at its end (files);
    # labels given online cannot know the rest of the stream.
    min_speakers: int | None = None
    # Tokens, words and the final carry how sure the model is (None: the server's choice).
    confidence: bool | None = None

    def __post_init__(self) -> None:
        for name in ("min_speakers", "max_speakers"):
            count = getattr(self, name)
            if count is not None and not 1 <= count <= MAX_SPEAKERS:
                raise InvalidFieldError(f"{name} must be within 1..{MAX_SPEAKERS}")
        low, high = self.min_speakers, self.max_speakers
        if low is not None and high is not None and low > high:
            raise InvalidFieldError("min_speakers must not be above max_speakers")
        if self.commit is not None and self.commit not in COMMIT_MODES:
            modes = " or ".join(COMMIT_MODES)
            raise InvalidFieldError(f"commit must be {modes}; got {self.commit!r}")
        if self.language not in CLIENT_LANGUAGES:
            allowed = ", ".join(CLIENT_LANGUAGES)
            raise InvalidFieldError(f"language must be one of {allowed}; got {self.language!r}")
        if self.pace not in PACES:
            raise InvalidFieldError(f"pace must be live or replay; got {self.pace!r}")
        if len(self.hotwords) > MAX_HOTWORDS:
            raise InvalidFieldError(f"at most {MAX_HOTWORDS} hotwords; got {len(self.hotwords)}")


@dataclass(frozen=True, slots=True)
class Configure:
    """Set the audio format and options. Once audio has flowed only the options may change.

    `channel_labels` names each channel of a stream recognised channel by channel (a
    call's agent and customer); empty mixes the channels to mono. `stream_id` is the name
    subscribers follow the stream by (None: the session id). Neither may change later,
    nor may `webhook_url`.
    """

    audio: AudioFormat = field(default_factory=AudioFormat)
    options: StreamOptions = field(default_factory=StreamOptions)
    channel_labels: tuple[str, ...] = ()
    stream_id: str | None = None
    # Where the server POSTs this stream's finals (the server decides which URLs it allows).
    webhook_url: str | None = None

    def __post_init__(self) -> None:
        if self.webhook_url is not None and not self.webhook_url.startswith(WEBHOOK_SCHEMES):
            raise InvalidFieldError("webhook_url must be an http:// or https:// URL")
        labels = self.channel_labels
        if any(not isinstance(label, str) or not 0 < len(label) <= 64 for label in labels):
            raise InvalidFieldError("each channel label must be a string of 1 to 64 characters")
        if labels and (len(labels) != self.audio.channels or len(set(labels)) != len(labels)):
            raise InvalidFieldError(
                f"channel_labels must name each of the {self.audio.channels} channels once"
            )
        if self.stream_id is not None and not STREAM_ID.fullmatch(self.stream_id):
            raise InvalidFieldError(
                "stream_id must be 1 to 128 letters, digits or ._:- and start with a letter "
                "or digit"
            )

    @property
    def multichannel(self) -> bool:
        return bool(self.channel_labels)


@dataclass(frozen=True, slots=True)
class Audio:
    """Audio bytes in the configured wire format.

    `channel` set: mono bytes of that one channel of a multichannel stream (a protocol
    that carries its channels apart, as Twilio's tracks); None: interleaved frames.
    """

    data: bytes
    channel: int | None = None


@dataclass(frozen=True, slots=True)
class Commit:
    """End the current utterance now (a client's turn detection)."""


@dataclass(frozen=True, slots=True)
class Cut:
    """End any utterance in progress here, as `Commit` does, but with none it is no error:
    a protocol event that marks a boundary in the call (AudioHook's `update`, `paused`)."""


@dataclass(frozen=True, slots=True)
class Clear:
    """Drop the audio of the current utterance without decoding it."""


@dataclass(frozen=True, slots=True)
class Stop:
    """No more audio: owed finals, then `Ended`."""


@dataclass(frozen=True, slots=True)
class Mark:
    """Ask for `Marked(token)` after every event before it: a protocol's in-order reply
    to a message that changes nothing (AudioHook's `ping`)."""

    token: str


Command = Configure | Audio | Commit | Cut | Clear | Stop | Mark


#: The smallest boost a clamped weight becomes (FunASR clients send weights of 0 too).
MIN_CLAMPED_BOOST = 0.1


def hotwords_from(
    phrases: Mapping[str, float] | Iterable[str], scale: float = 1.0, clamp: bool = False
) -> tuple[Hotword, ...]:
    """Hotwords from phrases (each at the default boost) or {phrase: weight} (boost = weight
    x `scale`, brought into range with `clamp`); the first of equal phrases wins; a bad one
    is an InvalidFieldError."""
    if isinstance(phrases, Mapping):
        pairs = [(str(p), float(w) * scale) for p, w in phrases.items()]
        if clamp:
            pairs = [(p, min(max(b, MIN_CLAMPED_BOOST), MAX_HOTWORD_BOOST)) for p, b in pairs]
    else:
        pairs = [(str(p), DEFAULT_HOTWORD_BOOST) for p in phrases]
    seen: dict[str, Hotword] = {}
    for phrase, boost in pairs:
        key = " ".join(phrase.split())
        if key in seen:
            continue
        try:
            seen[key] = Hotword(key, boost)
        except ValueError as exc:
            raise InvalidFieldError(str(exc)) from exc
    if len(seen) > MAX_HOTWORDS:
        raise InvalidFieldError(f"at most {MAX_HOTWORDS} hotwords; got {len(seen)}")
    return tuple(seen.values())


#: Why a model cannot write some of these hotwords (None: it can write them all).
HotwordRefusal = Callable[[Sequence[Hotword]], str | None]


def writes_any(_: Sequence[Hotword]) -> str | None:
    """A model whose vocabulary is not known here: the engine refuses what it cannot write."""
    return None


def merged_hotwords(own: Sequence[Hotword], server: Sequence[Hotword]) -> tuple[Hotword, ...]:
    """A session's hotwords, then the server's it does not name, up to the limit."""
    named = {h.phrase for h in own}
    extra = [h for h in server if h.phrase not in named]
    return (*own, *extra[: max(0, MAX_HOTWORDS - len(own))])


#: A prompt is read as hotwords only when it is a list of phrases this short.
MAX_PROMPT_PHRASE_WORDS = 4


#: The longest prompt a client may send: a few sentences, or a list of a thousand names.
MAX_PROMPT_CHARS = 16 * 1024


def prompt_hotwords(prompt: str) -> tuple[Hotword, ...]:
    """The hotwords a prompt lists (none for free text); InvalidFieldError for one over
    MAX_PROMPT_CHARS or listing more than MAX_HOTWORDS, checked before any is made."""
    if len(prompt) > MAX_PROMPT_CHARS:
        raise InvalidFieldError(f"at most {MAX_PROMPT_CHARS} characters; got {len(prompt)}")
    phrases = prompt_keywords(prompt)
    if len(phrases) > MAX_HOTWORDS:
        raise InvalidFieldError(f"at most {MAX_HOTWORDS} hotwords; got {len(phrases)}")
    return hotwords_from(phrases)


def prompt_keywords(prompt: str) -> tuple[str, ...]:
    """The phrases of a prompt that lists them (split by commas, semicolons or lines, each
    of at most four words, no sentence inside); () for free text, which is no hotword list."""
    items = [" ".join(p.split()) for p in re.split(r"[,;\n]", prompt)]
    phrases = [p for p in items if p]
    if not phrases:
        return ()
    for phrase in phrases:
        if len(phrase.split()) > MAX_PROMPT_PHRASE_WORDS or re.search(r"[.!?]\s|[.!?]$", phrase):
            return ()
    return tuple(dict.fromkeys(phrases))
