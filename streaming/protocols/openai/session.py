"""OpenAI Realtime transcription-session settings: parse updates (GA and beta), render them back.

Updates are partial, as OpenAI's are: a field that is present replaces the current value,
`null` clears turn detection or noise reduction, and an absent field keeps its value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from engine.types import MAX_HOTWORDS
from streaming.audio.decoder import STANDARD_RATES, AudioFormat
from streaming.commands import (
    Configure,
    StreamOptions,
    TurnDetection,
    hotwords_from,
    prompt_hotwords,
    prompt_keywords,
)
from streaming.errors import InvalidFieldError
from streaming.pins import Pins
from streaming.protocols.openai.fields import (
    RealtimeFieldError,
    boolean,
    check_keys,
    choice,
    integer,
    join,
    number,
    obj,
    required,
    strings,
    text,
)

T = TypeVar("T")

PCM_RATE = 24_000  # OpenAI's pcm16 / audio/pcm rate
G711_RATE = 8_000
GA_FORMATS = {"audio/pcm": "pcm_s16le", "audio/pcmu": "mulaw", "audio/pcma": "alaw"}
BETA_FORMATS = {"pcm16": "pcm_s16le", "g711_ulaw": "mulaw", "g711_alaw": "alaw"}
#: What SenseVoice can be told to expect; anything else is refused rather than guessed at.
LANGUAGES = ("en", "zh", "ja", "ko", "yue")
INCLUDE_VALUES = ("item.input_audio_transcription.logprobs",)
#: A prompt's length, checked before it is read for phrases: Whisper's prompts are 224
#: tokens; a prompt that lists hundreds of phrases fits (`keywords` carry longer lists).
# Fields of the session object the server sends, which a client may echo back unchanged.
ECHOED_KEYS = ("id", "object", "expires_at")
TRANSCRIPTION_KEYS = ("model", "language", "prompt", "keywords", "languages", "delay")
TURN_KEYS = (
    "type",
    "threshold",
    "prefix_padding_ms",
    "silence_duration_ms",
    "eagerness",
    "create_response",
    "interrupt_response",
    "idle_timeout_ms",
)


@dataclass(frozen=True, slots=True)
class VadSettings:
    """Server turn detection. Only the two durations reach the VAD; the rest is echoed."""

    type: str = "server_vad"  # semantic_vad runs the same VAD
    threshold: float | None = None
    prefix_padding_ms: int | None = None  # None: the server's pre-roll
    silence_duration_ms: int | None = None  # None: the server's end silence
    eagerness: str | None = None

    @property
    def turns(self) -> TurnDetection:
        return TurnDetection(True, self.silence_duration_ms, self.prefix_padding_ms)


@dataclass(frozen=True, slots=True)
class NoiseReduction:
    """Accepted and echoed; the server applies no noise reduction."""

    type: str | None = None
    strength: float | None = None


@dataclass(frozen=True, slots=True)
class Transcription:
    model: str | None = None  # None: the name of the model the server serves
    language: str = "auto"
    prompt: str = ""  # reported back, not used in decoding
    keywords: tuple[str, ...] = ()  # become hotwords (the prompt, free text, does not)


@dataclass(frozen=True, slots=True)
class RealtimeSettings:
    """One session's effective settings; the default is OpenAI's default session."""

    encoding: str = "pcm_s16le"
    sample_rate: int = PCM_RATE
    transcription: Transcription = field(default_factory=Transcription)
    turn_detection: VadSettings | None = field(default_factory=VadSettings)
    noise_reduction: NoiseReduction | None = None
    include: tuple[str, ...] = ()

    @property
    def audio(self) -> AudioFormat:
        return AudioFormat(self.encoding, self.sample_rate, 1)

    @property
    def logprobs(self) -> bool:
        """Whether deltas and `completed` carry each token's log-probability."""
        return INCLUDE_VALUES[0] in self.include

    @property
    def turns(self) -> TurnDetection:
        vad = self.turn_detection
        return TurnDetection(vad=False) if vad is None else vad.turns

    @property
    def bytes_per_second(self) -> int:
        return self.sample_rate * self.audio.bytes_per_frame

    def command(self) -> Configure:
        t = self.transcription
        options = StreamOptions(
            language=t.language,
            turns=self.turns,
            # Keywords, and a prompt that lists phrases (free text is no hotword list).
            hotwords=hotwords_from([*t.keywords, *prompt_keywords(t.prompt)]),
            prompt=t.prompt,
            confidence=True if self.logprobs else None,
        )
        return Configure(self.audio, options)


def pinned_settings(settings: RealtimeSettings, pins: Pins) -> RealtimeSettings:
    """`settings` with what a client secret fixes in place of its own: the format, the
    language and the keywords (so the session object reports what the session does)."""
    changes: dict[str, Any] = {}
    if pins.encoding is not None:
        changes["encoding"] = pins.encoding
    if pins.sample_rate is not None:
        changes["sample_rate"] = pins.sample_rate
    t = settings.transcription
    if pins.language is not None:
        t = replace(t, language=pins.language)
    if pins.hotwords is not None:
        t = replace(t, keywords=tuple(h.phrase for h in pins.hotwords))
    return replace(settings, transcription=t, **changes)


# ---- parsing ------------------------------------------------------------------------


def _opt(value: Mapping[str, Any], key: str, read: Callable[[object, str], T], at: str) -> T | None:
    """A present, non-null field read with `read`; None when absent or null."""
    item = value.get(key)
    return None if item is None else read(item, join(at, key))


def language_option(value: object, param: str) -> str:
    """An ISO 639 code (a region tag is dropped) as the session's language; null is auto."""
    if value is None:
        return "auto"
    code = text(value, param).strip().lower().replace("_", "-").split("-")[0]
    if code in ("", "auto"):
        return "auto"
    if code not in LANGUAGES:
        raise RealtimeFieldError(
            f"Language {value!r} is not supported: SenseVoice transcribes "
            f"{', '.join(LANGUAGES)}; leave language unset to detect it.",
            param,
        )
    return code


def _ga_format(value: object, param: str) -> tuple[str, int]:
    fmt = obj(value, param)
    check_keys(fmt, ("type", "rate"), param)
    encoding = GA_FORMATS[choice(required(fmt, "type", param), GA_FORMATS, join(param, "type"))]
    default = PCM_RATE if encoding == "pcm_s16le" else G711_RATE
    rate = _opt(fmt, "rate", integer, param)
    rate = default if rate is None else rate
    # An extension: audio/pcm at any rate the decoder takes (16000 needs no resampling).
    allowed = STANDARD_RATES if encoding == "pcm_s16le" else (G711_RATE,)
    if rate not in allowed:
        raise RealtimeFieldError(
            f"Invalid value: {rate}. Supported rates for {encoding}: "
            f"{', '.join(map(str, allowed))}.",
            join(param, "rate"),
        )
    return encoding, rate


def _milliseconds(value: object, param: str, check: Callable[[int], TurnDetection]) -> int:
    """An integer duration, range-checked by the core's own TurnDetection rules."""
    ms = integer(value, param)
    try:
        check(ms)
    except InvalidFieldError as exc:
        raise RealtimeFieldError(exc.message, param) from exc
    return ms


def parse_turn_detection(value: object, param: str) -> VadSettings | None:
    if value is None:
        return None
    vad = obj(value, param)
    check_keys(vad, TURN_KEYS, param)
    kind = choice(
        vad.get("type", "server_vad"), ("server_vad", "semantic_vad"), join(param, "type")
    )
    threshold = _opt(vad, "threshold", number, param)
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise RealtimeFieldError("threshold must be within 0.0..1.0", join(param, "threshold"))
    for flag in ("create_response", "interrupt_response"):
        _opt(vad, flag, boolean, param)  # conversation settings: checked, then ignored
    _opt(vad, "idle_timeout_ms", integer, param)
    eagerness = _opt(vad, "eagerness", text, param)
    if eagerness is not None:
        choice(eagerness, ("low", "medium", "high", "auto"), join(param, "eagerness"))
    prefix = vad.get("prefix_padding_ms")
    silence = vad.get("silence_duration_ms")
    return VadSettings(
        kind,
        threshold,
        None if prefix is None else _milliseconds(prefix, join(param, "prefix_padding_ms"), _pre),
        None
        if silence is None
        else _milliseconds(silence, join(param, "silence_duration_ms"), _end),
        eagerness,
    )


def _pre(ms: int) -> TurnDetection:
    return TurnDetection(preroll_ms=ms)


def _end(ms: int) -> TurnDetection:
    return TurnDetection(end_silence_ms=ms)


def parse_transcription(value: object, param: str, current: Transcription) -> Transcription:
    if value is None:
        return Transcription()
    given = obj(value, param)
    check_keys(given, TRANSCRIPTION_KEYS, param)
    changes: dict[str, Any] = {}
    if "model" in given:
        changes["model"] = _opt(given, "model", text, param)
    if "language" in given:
        changes["language"] = language_option(given["language"], join(param, "language"))
    if "prompt" in given:
        changes["prompt"] = _opt(given, "prompt", prompt, param) or ""
    if "keywords" in given:
        changes["keywords"] = _opt(given, "keywords", keywords, param) or ()
    _opt(given, "languages", strings, param)  # a newer hint: checked, then ignored
    _opt(given, "delay", text, param)
    return replace(current, **changes)


def prompt(value: object, param: str) -> str:
    """The prompt; one that lists phrases is checked as hotwords here."""
    given = text(value, param)
    try:
        prompt_hotwords(given)
    except InvalidFieldError as exc:
        raise RealtimeFieldError(f"Invalid '{param}': {exc}", param) from exc
    return given


def keywords(value: object, param: str) -> tuple[str, ...]:
    """Keywords, each checked as a hotword here so that a bad one changes nothing; their
    number is checked first, before any is read."""
    words = strings(value, param, MAX_HOTWORDS)
    try:
        hotwords_from(words)
    except InvalidFieldError as exc:
        raise RealtimeFieldError(str(exc), param) from exc
    return words


def parse_noise_reduction(value: object, param: str) -> NoiseReduction | None:
    if value is None:
        return None
    given = obj(value, param)
    check_keys(given, ("type", "strength"), param)
    kind = _opt(given, "type", text, param)
    if kind is not None:
        choice(kind, ("near_field", "far_field"), join(param, "type"))
    return NoiseReduction(kind, _opt(given, "strength", number, param))


def _include(value: object, param: str) -> tuple[str, ...]:
    if value is None:
        return ()
    values = strings(value, param)
    for i, item in enumerate(values):
        choice(item, INCLUDE_VALUES, f"{param}[{i}]")
    return values


def parse_ga(value: object, current: RealtimeSettings) -> RealtimeSettings:
    """`session.update`'s `session` (GA shape) applied to the current settings."""
    session = obj(value, "session")
    # Checked first: a conversation session's fields would otherwise read as unknown.
    if required(session, "type", "session") != "transcription":
        raise RealtimeFieldError(
            "This endpoint serves transcription sessions only: session.type must be "
            "'transcription'.",
            "session.type",
        )
    check_keys(session, ("type", "audio", "include", *ECHOED_KEYS), "session")
    settings = current
    if "audio" in session:
        audio = obj(session["audio"], "session.audio")
        check_keys(audio, ("input",), "session.audio")
        if "input" in audio:
            settings = _ga_input(obj(audio["input"], "session.audio.input"), settings)
    if "include" in session:
        settings = replace(settings, include=_include(session["include"], "session.include"))
    return settings


def _ga_input(given: Mapping[str, Any], current: RealtimeSettings) -> RealtimeSettings:
    at = "session.audio.input"
    check_keys(given, ("format", "noise_reduction", "transcription", "turn_detection"), at)
    changes: dict[str, Any] = {}
    if "format" in given:
        changes["encoding"], changes["sample_rate"] = _ga_format(given["format"], f"{at}.format")
    if "noise_reduction" in given:
        changes["noise_reduction"] = parse_noise_reduction(
            given["noise_reduction"], f"{at}.noise_reduction"
        )
    if "transcription" in given:
        changes["transcription"] = parse_transcription(
            given["transcription"], f"{at}.transcription", current.transcription
        )
    if "turn_detection" in given:
        changes["turn_detection"] = parse_turn_detection(
            given["turn_detection"], f"{at}.turn_detection"
        )
    return replace(current, **changes)


BETA_KEYS = (
    "input_audio_format",
    "input_audio_transcription",
    "turn_detection",
    "input_audio_noise_reduction",
    "include",
    "modalities",
    "client_secret",
    *ECHOED_KEYS,
)


def parse_beta(value: object, current: RealtimeSettings) -> RealtimeSettings:
    """`transcription_session.update`'s `session` (beta shape) applied to the settings."""
    session = obj(value, "session")
    check_keys(session, BETA_KEYS, "session")
    changes: dict[str, Any] = {}
    if "input_audio_format" in session:
        name = choice(session["input_audio_format"], BETA_FORMATS, "session.input_audio_format")
        changes["encoding"] = BETA_FORMATS[name]
        changes["sample_rate"] = PCM_RATE if name == "pcm16" else G711_RATE
    if "input_audio_transcription" in session:
        changes["transcription"] = parse_transcription(
            session["input_audio_transcription"],
            "session.input_audio_transcription",
            current.transcription,
        )
    if "turn_detection" in session:
        changes["turn_detection"] = parse_turn_detection(
            session["turn_detection"], "session.turn_detection"
        )
    if "input_audio_noise_reduction" in session:
        changes["noise_reduction"] = parse_noise_reduction(
            session["input_audio_noise_reduction"], "session.input_audio_noise_reduction"
        )
    if "include" in session:
        changes["include"] = _include(session["include"], "session.include")
    _opt(session, "modalities", strings, "session")  # text only, whatever is asked
    return replace(current, **changes)
