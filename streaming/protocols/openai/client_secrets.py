"""OpenAI's `POST /v1/realtime/client_secrets` (GA): the request read strictly, the answer.

The session object is read by the Realtime codec's own rules (`parse_ga`), so a secret
takes exactly the sessions `session.update` would. What it names of the audio format, the
language and the keywords (or a prompt that lists phrases: hotwords, as in a session) is
what the secret pins for every session it opens. A `realtime` (conversation) session is
taken too: this server transcribes, so only its `audio.input` and `include` matter.

Beside OpenAI's fields the request may name ours: `max_sessions`, `scopes` (what the
secret may do besides streaming; the names are the server's, passed in) and `tenant` (whose
streams it speaks for; the server decides who may name which).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from streaming.pins import Pins
from streaming.protocols.openai.fields import (
    INVALID_TYPE,
    RealtimeFieldError,
    check_keys,
    choice,
    integer,
    obj,
    required,
    strings,
    text,
)
from streaming.protocols.openai.session import RealtimeSettings, parse_ga

#: OpenAI's bounds and default for `expires_after.seconds`.
MIN_TTL_S = 10
MAX_TTL_S = 7200
DEFAULT_TTL_S = 600
#: Ours: `max_sessions`, how many sessions the secret may open (at most the server's cap);
#: `scopes`, what it may do besides streaming; `tenant`, whose streams it speaks for.
REQUEST_KEYS = ("expires_after", "session", "max_sessions", "scopes", "tenant")
SESSION_KINDS = ("transcription", "realtime")
#: What the SDK answers a session of each kind as.
SESSION_OBJECTS = {
    "transcription": "realtime.transcription_session",
    "realtime": "realtime.session",
}
#: A conversation session's fields (`RealtimeSessionCreateRequest`): taken, and unused here.
REALTIME_KEYS = (
    "type",
    "audio",
    "include",
    "instructions",
    "max_output_tokens",
    "model",
    "output_modalities",
    "parallel_tool_calls",
    "prompt",
    "reasoning",
    "tool_choice",
    "tools",
    "tracing",
    "truncation",
)


@dataclass(frozen=True, slots=True)
class SecretRequest:
    """A checked request: how long the secret lives, how many sessions it opens, what it
    pins, the session object as given (echoed in the answer), the scopes it names and the
    tenant it names (None: the minting key's)."""

    ttl_s: int
    max_sessions: int
    pins: Pins
    session: Mapping[str, Any]
    scopes: frozenset[str] = frozenset()
    tenant: str | None = None


def parse_secret_request(
    body: object, max_sessions: int, scopes: Collection[str] = ()
) -> SecretRequest:
    """The request body, read as OpenAI reads it; raises RealtimeFieldError (a 400).

    `scopes`: the names a request may ask for (any other is refused).
    """
    if not isinstance(body, dict):
        raise RealtimeFieldError("The request body must be a JSON object.", None, INVALID_TYPE)
    check_keys(body, REQUEST_KEYS, "")
    session = body.get("session")
    given = {"type": "transcription"} if session is None else obj(session, "session")
    return SecretRequest(
        ttl_s=_ttl(body.get("expires_after")),
        max_sessions=_max_sessions(body.get("max_sessions"), max_sessions),
        pins=session_pins(given),
        session=given,
        scopes=_scopes(body.get("scopes"), scopes),
        tenant=None if body.get("tenant") is None else text(body["tenant"], "tenant"),
    )


def _scopes(value: object, known: Collection[str]) -> frozenset[str]:
    if value is None:
        return frozenset()
    names = strings(value, "scopes")
    for i, name in enumerate(names):
        choice(name, known, f"scopes[{i}]")
    return frozenset(names)


def _ttl(value: object) -> int:
    if value is None:
        return DEFAULT_TTL_S
    given = obj(value, "expires_after")
    check_keys(given, ("anchor", "seconds"), "expires_after")
    choice(given.get("anchor", "created_at"), ("created_at",), "expires_after.anchor")
    if given.get("seconds") is None:
        return DEFAULT_TTL_S
    seconds = integer(given["seconds"], "expires_after.seconds")
    if not MIN_TTL_S <= seconds <= MAX_TTL_S:
        raise RealtimeFieldError(
            f"Invalid value: {seconds}. expires_after.seconds must be within "
            f"{MIN_TTL_S}..{MAX_TTL_S}.",
            "expires_after.seconds",
        )
    return seconds


def _max_sessions(value: object, cap: int) -> int:
    if value is None:
        return cap
    count = integer(value, "max_sessions")
    if not 1 <= count <= cap:
        raise RealtimeFieldError(
            f"Invalid value: {count}. max_sessions must be within 1..{cap} on this server.",
            "max_sessions",
        )
    return count


def session_pins(session: Mapping[str, Any]) -> Pins:
    """What a secret's session object pins: the format, language and hotwords it names."""
    kind = choice(required(session, "type", "session"), SESSION_KINDS, "session.type")
    if kind == "realtime":
        check_keys(session, REALTIME_KEYS, "session")
        session = _as_transcription(session)
    settings = parse_ga(session, RealtimeSettings())  # every field checked, as an update's
    audio_in = session.get("audio", {}).get("input", {})
    transcription = audio_in.get("transcription") or {}
    named_format = audio_in.get("format") is not None
    hotwords = settings.command().options.hotwords
    # Keywords (even none) fix the hotwords; a prompt does when it lists phrases.
    phrases = "keywords" in transcription or bool(hotwords)
    return Pins(
        language=settings.transcription.language if "language" in transcription else None,
        hotwords=hotwords if phrases else None,
        encoding=settings.encoding if named_format else None,
        sample_rate=settings.sample_rate if named_format else None,
    )


def _as_transcription(session: Mapping[str, Any]) -> dict[str, Any]:
    """A conversation session's transcription part, as a transcription session names it."""
    out: dict[str, Any] = {"type": "transcription"}
    if session.get("audio") is not None:
        audio = obj(session["audio"], "session.audio")
        check_keys(audio, ("input", "output"), "session.audio")  # output: a voice's, unused
        if "input" in audio:
            out["audio"] = {"input": audio["input"]}
    if "include" in session:
        out["include"] = session["include"]
    return out


def secret_answer(value: str, expires_at: int, session_id: str, asked: SecretRequest) -> Any:
    """The answer (`ClientSecretCreateResponse`): the secret, its expiry, and the session
    as given, with the id and object type the SDK's session models require."""
    session = dict(asked.session)
    kind = str(session["type"])
    return {
        "value": value,
        "expires_at": expires_at,
        "session": {"id": session_id, "object": SESSION_OBJECTS[kind], **session},
    }
