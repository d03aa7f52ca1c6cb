"""OpenAI's `logprobs` lists (file API `include[]=logprobs`, Realtime's include): one
entry a token, `{token, logprob, bytes}`, whose tokens join to the transcript's text.

A token's logprob is the engine's (its mean frame log-posterior). A redacted token keeps
its placeholder text and gets no logprob (null), nor does a token decoded before the
engine could score.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from engine.types import Token
from streaming.events import Final


def entries(tokens: Iterable[Token], lead: str | None = "") -> list[dict[str, Any]]:
    """Entries for tokens with text; the first token's leading spaces become `lead` (as
    a transcript's text is stripped), or stay as they are with None."""
    out: list[dict[str, Any]] = []
    for token in tokens:
        if out or lead is None:
            text = token.text
        elif token.text.strip():
            text = lead + token.text.lstrip()
        else:
            continue  # a lone space before the first word: the text is stripped of it
        if not text:
            continue
        logprob = None if token.logprob is None else round(token.logprob, 6)
        out.append({"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))})
    return out


def of_finals(finals: Sequence[Final]) -> list[dict[str, Any]]:
    """The entries of finals joined as `files.full_text` joins their texts (with a space)."""
    out: list[dict[str, Any]] = []
    for final in finals:
        if final.transcript.text:
            out += entries(final.transcript.tokens, " " if out else "")
    return out


def after(final: Final, sent_chars: int) -> list[dict[str, Any]]:
    """The entries of the final's text past its first `sent_chars` characters (what a
    Realtime delta already carried): the tokens that end beyond them."""
    out: list[dict[str, Any]] = []
    spelled = 0
    for entry in entries(final.transcript.tokens):
        spelled += len(entry["token"])
        if spelled > sent_chars:
            out.append(entry)
    return out


def average(tokens: Iterable[Token]) -> float:
    """Whisper's `avg_logprob`: the mean log-probability of the scored tokens (0 if none)."""
    scored = [t.logprob for t in tokens if t.logprob is not None]
    return round(sum(scored) / len(scored), 6) if scored else 0.0
