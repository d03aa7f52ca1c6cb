"""OpenAI's file-transcription API (`POST /v1/audio/transcriptions`), sans-I/O.

Form fields in, a `TranscriptionJob` out; finals in, response bodies (json, text, srt,
vtt, verbose_json, diarized_json) or server-sent events out. The server only moves the
bytes.

Speakers: `diarized_json` labels who spoke (and asks for it); the other formats carry
speakers when the server labels them (`--diarize`): `speaker` on verbose_json segments,
`[S1]` before SubRip cue text and a `<v S1>` voice tag in WebVTT. `diarized_json` names
speakers as OpenAI's does, `A`, `B`, … in order of first appearance.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes

from streaming.commands import CLIENT_LANGUAGES, prompt_hotwords
from streaming.errors import InvalidFieldError
from streaming.events import Final
from streaming.protocols.openai import logprobs
from streaming.redaction.apply import REDACTED_ID
from streaming.speakers.labels import turn_index
from streaming.speakers.online import MAX_SPEAKERS
from streaming.words import words_of

FORMATS = ("json", "text", "srt", "vtt", "verbose_json", "diarized_json")
GRANULARITIES = ("segment", "word")
MAX_KNOWN_SPEAKERS = 4  # as OpenAI's API takes
NUMBERED = re.compile(r"S\d+|")  # a speaker label as the server numbers them (or none)
#: Whisper names languages in verbose_json; SenseVoice's codes map onto them.
LANGUAGE_NAMES: Mapping[str, str] = {
    "zh": "chinese",
    "en": "english",
    "yue": "cantonese",
    "ja": "japanese",
    "ko": "korean",
}
CONTENT_TYPES: Mapping[str, str] = {
    "json": "application/json",
    "verbose_json": "application/json",
    "diarized_json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}


class FileApiError(Exception):
    """A request the API refuses, with its HTTP status and OpenAI's error object."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        error = {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        return {"error": error}


@dataclass(frozen=True, slots=True)
class TranscriptionJob:
    """What the client asked for, checked."""

    model: str
    language: str = "auto"
    prompt: str = ""
    response_format: str = "json"
    granularities: frozenset[str] = frozenset({"segment"})
    stream: bool = False
    # Speakers to name, each with the audio of a reference clip (its container's bytes).
    known_speakers: tuple[tuple[str, bytes], ...] = ()
    # How many speakers there are, if the caller knows (this server's own fields).
    min_speakers: int | None = None
    max_speakers: int | None = None
    # `include[]=logprobs`: each token's log-probability in `logprobs` (json, and events).
    logprobs: bool = False

    @property
    def confidence(self) -> bool | None:
        """Whether tokens must be scored: for logprobs, and verbose_json's `avg_logprob`
        (None: the server's choice)."""
        return True if self.logprobs or self.response_format == "verbose_json" else None

    @property
    def diarize(self) -> bool | None:
        """Whether to label who spoke (None: the server's choice)."""
        asked = self.response_format == "diarized_json" or self.known_speakers
        return True if asked or self.min_speakers or self.max_speakers else None


def parse_fields(fields: Mapping[str, Sequence[str]]) -> TranscriptionJob:
    """The form's text fields as a job; raises FileApiError (400) for a bad one."""

    def one(name: str, default: str = "") -> str:
        values = fields.get(name) or [default]
        return values[-1].strip()

    model = one("model")
    if not model:
        raise FileApiError(400, "you must provide a model parameter", "model")
    response_format = one("response_format", "json")
    if response_format not in FORMATS:
        message = f"response_format must be one of {', '.join(FORMATS)}; got {response_format!r}"
        raise FileApiError(400, message, "response_format", "invalid_value")
    language = one("language", "auto") or "auto"
    if language not in CLIENT_LANGUAGES:
        message = (
            f"language {language!r} is not supported; use one of {', '.join(CLIENT_LANGUAGES)}"
        )
        raise FileApiError(400, message, "language", "unsupported_language")
    granularities = _granularities(fields)
    speakers = response_format == "diarized_json" or "known_speaker_names[]" in fields
    if one("stream", "false").lower() == "true" and speakers:
        message = "stream cannot be combined with speakers (diarized_json, known speakers)"
        raise FileApiError(400, message, "stream")
    if granularities != {"segment"} and response_format != "verbose_json":
        message = "timestamp_granularities needs response_format verbose_json"
        raise FileApiError(400, message, "timestamp_granularities[]")
    stream = one("stream", "false").lower()
    if stream not in ("true", "false"):
        raise FileApiError(400, f"stream must be true or false; got {stream!r}", "stream")
    prompt = one("prompt")
    try:  # a prompt that lists phrases becomes hotwords: checked as they are
        prompt_hotwords(prompt)
    except InvalidFieldError as exc:
        raise FileApiError(400, str(exc), "prompt") from exc
    return TranscriptionJob(
        model,
        language,
        prompt,
        response_format,
        granularities,
        stream == "true",
        known_speakers(fields),
        *speaker_counts(one("min_speakers"), one("max_speakers")),
        logprobs=_includes_logprobs(fields, response_format),
    )


def _includes_logprobs(fields: Mapping[str, Sequence[str]], response_format: str) -> bool:
    """Whether `include[]` asks for logprobs; FileApiError (400) for anything else it
    names, or logprobs with a format other than json (as OpenAI's API refuses)."""
    asked = [*fields.get("include[]", ()), *fields.get("include", ())]
    for value in asked:
        if value.strip() != "logprobs":
            message = f"include[] may only hold logprobs; got {value!r}"
            raise FileApiError(400, message, "include[]", "invalid_value")
    if asked and response_format != "json":
        message = "include[]=logprobs needs response_format json"
        raise FileApiError(400, message, "include[]")
    return bool(asked)


def speaker_counts(low: str, high: str) -> tuple[int | None, int | None]:
    """`min_speakers` and `max_speakers` (empty: not given); FileApiError (400) unless
    each is a whole number within 1..32, the first no larger than the second."""
    counts: list[int | None] = []
    for name, text in (("min_speakers", low), ("max_speakers", high)):
        if not text:
            counts.append(None)
            continue
        if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_SPEAKERS:
            raise FileApiError(400, f"{name} must be a whole number within 1..{MAX_SPEAKERS}", name)
        counts.append(int(text))
    least, most = counts
    if least is not None and most is not None and least > most:
        raise FileApiError(400, "min_speakers must not be above max_speakers", "min_speakers")
    return least, most


def known_speakers(fields: Mapping[str, Sequence[str]]) -> tuple[tuple[str, bytes], ...]:
    """`known_speaker_names[]` with their `known_speaker_references[]` (data URLs), in
    order; raises FileApiError (400) unless they pair up, at most `MAX_KNOWN_SPEAKERS`."""
    names = [*fields.get("known_speaker_names[]", ()), *fields.get("known_speaker_names", ())]
    refs = [
        *fields.get("known_speaker_references[]", ()),
        *fields.get("known_speaker_references", ()),
    ]
    param = "known_speaker_references[]"
    if len(names) != len(refs):
        message = "known_speaker_names[] and known_speaker_references[] must pair up"
        raise FileApiError(400, message, param)
    if len(names) > MAX_KNOWN_SPEAKERS:
        message = f"at most {MAX_KNOWN_SPEAKERS} known speakers; got {len(names)}"
        raise FileApiError(400, message, "known_speaker_names[]")
    names = [n.strip() for n in names]
    if any(not 0 < len(n) <= 64 for n in names) or len(set(names)) != len(names):
        message = "each known speaker name must be 1 to 64 characters, and each name once"
        raise FileApiError(400, message, "known_speaker_names[]")
    if any(NUMBERED.fullmatch(n) for n in names):
        message = "S1, S2, … are the server's own speaker labels: name known speakers otherwise"
        raise FileApiError(400, message, "known_speaker_names[]")
    return tuple(
        (n, data_url_bytes(r, f"{param[:-2]}[{i}]"))
        for i, (n, r) in enumerate(zip(names, refs, strict=True))
    )


def data_url_bytes(url: str, param: str) -> bytes:
    """The bytes a `data:[<type>][;base64],<data>` URL holds; FileApiError (400) if it is
    not one (a reference must be audio: the decoder checks that)."""
    head, comma, data = url.strip().partition(",")
    if not head.startswith("data:") or not comma:
        raise FileApiError(400, f"{param} must be a data URL (data:audio/...;base64,...)", param)
    if not head.endswith(";base64"):
        return unquote_to_bytes(data)
    try:
        return base64.b64decode(data, validate=True)
    except binascii.Error as exc:
        raise FileApiError(400, f"{param} is not valid base64: {exc}", param) from exc


def _granularities(fields: Mapping[str, Sequence[str]]) -> frozenset[str]:
    asked = [
        *fields.get("timestamp_granularities[]", ()),
        *fields.get("timestamp_granularities", ()),
    ]
    for value in asked:
        if value not in GRANULARITIES:
            message = f"timestamp_granularities must be segment or word; got {value!r}"
            raise FileApiError(400, message, "timestamp_granularities[]", "invalid_value")
    return frozenset(asked) or frozenset({"segment"})


def full_text(finals: Sequence[Final]) -> str:
    return " ".join(f.transcript.text for f in finals if f.transcript.text).strip()


def render(job: TranscriptionJob, finals: Sequence[Final], duration_s: float) -> tuple[str, str]:
    """The response's content type and body for the job's format."""
    fmt = job.response_format
    if fmt == "text":
        body = full_text(finals) + "\n"
    elif fmt == "srt":
        body = subtitles(finals, srt=True)
    elif fmt == "vtt":
        body = subtitles(finals, srt=False)
    elif fmt == "verbose_json":
        body = _json(verbose(job, finals, duration_s))
    elif fmt == "diarized_json":
        body = _json(diarized(finals, duration_s))
    else:
        out: dict[str, Any] = {"text": full_text(finals)}
        if job.logprobs:
            out["logprobs"] = logprobs.of_finals(finals)
        body = _json(out | {"usage": usage(duration_s)})
    return CONTENT_TYPES[fmt], body


def usage(duration_s: float) -> dict[str, Any]:
    return {"type": "duration", "seconds": round(duration_s, 3)}


def verbose(job: TranscriptionJob, finals: Sequence[Final], duration_s: float) -> dict[str, Any]:
    spoken = [f for f in finals if f.transcript.text]
    langs = [f.transcript.lang for f in spoken if f.transcript.lang in LANGUAGE_NAMES]
    lang = max(set(langs), key=langs.count) if langs else job.language
    out: dict[str, Any] = {
        "task": "transcribe",
        "language": LANGUAGE_NAMES.get(lang, lang),
        "duration": round(duration_s, 3),
        "text": full_text(finals),
    }
    if "segment" in job.granularities:
        out["segments"] = [segment(i, f) for i, f in enumerate(spoken)]
    if "word" in job.granularities:
        out["words"] = [w for f in spoken for w in words(f)]
    # SenseVoice's extras per utterance, under one key that SDKs ignore.
    out["sensevoice"] = [extras(f) for f in spoken]
    out["usage"] = usage(duration_s)
    return out


def diarized(finals: Sequence[Final], duration_s: float) -> dict[str, Any]:
    """OpenAI's `diarized_json`: a segment per speaker turn of each utterance with text."""
    # A known speaker keeps their name; the others are lettered in order, skipping any
    # letters a known speaker is named.
    known = {f.speaker for f in finals if f.speaker and not NUMBERED.fullmatch(f.speaker)}
    letters = (name for k in itertools.count() if (name := _letters(k)) not in known)
    names: dict[str, str] = {}
    segments: list[dict[str, Any]] = []
    for final in (f for f in finals if f.transcript.text):
        for start, end, speaker, text in _turn_texts(final):
            if NUMBERED.fullmatch(speaker) and speaker not in names:
                names[speaker] = next(letters)
            name = names.get(speaker, speaker)
            segments.append(
                {
                    "type": "transcript.text.segment",
                    "id": f"seg_{len(segments)}",
                    "start": start / 1000,
                    "end": end / 1000,
                    "text": text,
                    "speaker": name,
                }
            )
    return {
        "task": "transcribe",
        "duration": round(duration_s, 3),
        "text": full_text(finals),
        "segments": segments,
        "usage": usage(duration_s),
    }


def _turn_texts(final: Final) -> list[tuple[int, int, str, str]]:
    """(start, end, speaker, text) of each speaker turn of a final, on the stream clock:
    the whole final when its speaker does not change (or none was labelled)."""
    turns = final.speaker_turns
    if len(turns) < 2 or not final.transcript.tokens:
        return [(final.start_ms, final.end_ms, final.speaker or "", final.transcript.text)]
    said: dict[int, str] = {}
    for token in final.transcript.tokens:
        middle = final.start_ms + (token.start_ms + token.end_ms) // 2
        k = turn_index(turns, middle)
        said[k] = said.get(k, "") + token.text
    return [
        (turns[k].start_ms, turns[k].end_ms, turns[k].speaker, " ".join(said[k].split()))
        for k in sorted(said)
    ]


def _letters(index: int) -> str:
    """A, B, … Z, AA, AB, …: OpenAI's speaker names."""
    name = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        name = chr(ord("A") + rest) + name
    return name


def segment(index: int, final: Final) -> dict[str, Any]:
    return {
        "id": index,
        "seek": final.start_ms // 10,  # Whisper counts seek in 10 ms frames
        "start": final.start_ms / 1000,
        "end": final.end_ms / 1000,
        "text": final.transcript.text,
        # A redacted token has no id to give (its own would spell what was redacted).
        "tokens": [t.id for t in final.transcript.tokens if t.id != REDACTED_ID],
        "temperature": 0.0,
        "avg_logprob": logprobs.average(final.transcript.tokens),
        "compression_ratio": 0.0,
        "no_speech_prob": round(final.transcript.no_speech_prob or 0.0, 6),
    } | ({"speaker": final.speaker} if final.speaker is not None else {})


def words(final: Final) -> list[dict[str, Any]]:
    """Tokens joined into words, on the stream's clock, each with its confidence when
    it was scored (an extra key SDKs ignore)."""
    out: list[dict[str, Any]] = []
    for word in words_of(final.transcript.tokens):
        start, end = final.start_ms + word.start_ms, final.start_ms + word.end_ms
        entry: dict[str, Any] = {"word": word.text, "start": start / 1000, "end": end / 1000}
        if word.confidence is not None:
            entry["confidence"] = round(word.confidence, 4)
        out.append(entry)
    return out


def extras(final: Final) -> dict[str, Any]:
    t = final.transcript
    return {
        "start": final.start_ms / 1000,
        "end": final.end_ms / 1000,
        "language": t.lang,
        "emotion": t.emotion,
        "event": t.event,
        "rich_text": t.rich_text,
    }


def subtitles(finals: Sequence[Final], *, srt: bool) -> str:
    """SubRip or WebVTT cues, one per utterance with text."""
    cues = [] if srt else ["WEBVTT", ""]
    spoken = [f for f in finals if f.transcript.text]
    for number, final in enumerate(spoken, start=1):
        start, end = _clock(final.start_ms, srt), _clock(final.end_ms, srt)
        if srt:
            cues.append(str(number))
        cues += [f"{start} --> {end}", _cue_text(final, srt), ""]
    return "\n".join(cues) + ("\n" if cues else "")


def _cue_text(final: Final, srt: bool) -> str:
    """The cue's text, with who spoke when it was labelled: WebVTT's voice tag, or a
    bracketed label in SubRip (which has none)."""
    text = final.transcript.text
    if final.speaker is None:
        return text
    return f"[{final.speaker}] {text}" if srt else f"<v {final.speaker}>{text}"


def _clock(ms: int, srt: bool) -> str:
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    sep = "," if srt else "."
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{sep}{millis:03d}"


def sse_delta(text: str, entries: list[dict[str, Any]] | None = None) -> str:
    """One `transcript.text.delta` server-sent event (with its tokens' `logprobs`)."""
    extra = {} if entries is None else {"logprobs": entries}
    return _sse({"type": "transcript.text.delta", "delta": text} | extra)


def sse_done(text: str, duration_s: float, entries: list[dict[str, Any]] | None = None) -> str:
    extra = {} if entries is None else {"logprobs": entries}
    return _sse(
        {"type": "transcript.text.done", "text": text} | extra | {"usage": usage(duration_s)}
    )


def sse_error(error: FileApiError) -> str:
    return _sse(error.body())


def _sse(payload: Mapping[str, Any]) -> str:
    return f"data: {_json(payload)}\n\n"


def _json(payload: Mapping[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
