"""AudioHook transcript confidence: the engine's, each word's own and the transcript's
mean over its words; 1.0 where nothing was scored (the field is required, 0 to 1)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest

from engine.types import Token, Transcript
from streaming.events import Final
from streaming.limits import SessionLimits
from streaming.protocols.audiohook.codec import AudioHookCodec
from streaming.protocols.audiohook.transcript import UNSCORED
from streaming.redaction.apply import redact
from streaming.redaction.detect import Found
from streaming.redaction.policies import Policy

SID = "7f0c5e2a-3b4d-4c6e-8f10-2a3b4c5d6e7f"


def said(*pieces: tuple[str, float | None]) -> Final:
    """A final of tokens of 100 ms each, with their log-probabilities (None: unscored)."""
    tokens = tuple(
        Token(10 + k, text, 100 * k, 100 * k + 90, logprob=lp)
        for k, (text, lp) in enumerate(pieces)
    )
    text = "".join(t.text for t in tokens).strip()
    return Final(
        1, 0, 100 * len(tokens), Transcript(text, "en", "neutral", "speech", True, text, tokens)
    )


def alternative(final: Final) -> dict[str, Any]:
    """The one alternative of the transcript entity the codec sends for `final`."""
    (frame,) = AudioHookCodec(SessionLimits(), SID).encode(final)
    assert isinstance(frame, str)
    (entity,) = json.loads(frame)["parameters"]["entities"]
    assert entity["type"] == "transcript"
    (alt,) = entity["data"]["alternatives"]
    return dict(alt)


def word_confidences(alt: dict[str, Any]) -> dict[str, float]:
    (display,) = alt["interpretations"]
    return {t["value"]: t["confidence"] for t in display["tokens"]}


def test_each_word_says_its_own_confidence_and_the_transcript_their_mean() -> None:
    alt = alternative(said((" hel", -0.1), ("lo", -0.3), (" world", -0.05), (" again", -1.0)))
    words = word_confidences(alt)
    # A word is as sure as its least sure token: "lo", not "hel".
    expected = {"hello": math.exp(-0.3), "world": math.exp(-0.05), "again": math.exp(-1.0)}
    assert words == pytest.approx(expected, abs=1e-4)
    assert alt["confidence"] == pytest.approx(sum(expected.values()) / 3, abs=1e-4)
    assert alt["confidence"] != UNSCORED
    assert all(0.0 <= c <= 1.0 for c in (*words.values(), alt["confidence"]))


def test_nothing_scored_says_one_everywhere() -> None:
    alt = alternative(said((" hel", None), ("lo", None), (" world", None)))
    assert alt["confidence"] == UNSCORED == 1.0
    assert word_confidences(alt) == {"hello": 1.0, "world": 1.0}


def test_a_word_with_an_unscored_token_takes_the_transcripts_confidence() -> None:
    alt = alternative(said((" hel", -0.1), ("lo", None), (" world", -0.5), (" ok", -0.25)))
    words = word_confidences(alt)
    mean = (math.exp(-0.5) + math.exp(-0.25)) / 2  # "hello" is unscored: not in the mean
    assert alt["confidence"] == pytest.approx(mean, abs=1e-4)
    assert words["hello"] == alt["confidence"]
    assert words["world"] == pytest.approx(math.exp(-0.5), abs=1e-4)


def test_a_redacted_word_tells_nothing_of_its_own_confidence() -> None:
    final = said(
        (" card", -0.2),
        (" 4111", -3.0),
        ("1111", -3.0),
        ("1111", -3.0),
        ("1111", -3.0),
        (" ok", -0.4),
    )
    text = final.transcript.text
    out = redact(text, final.transcript.tokens, [Found(5, 21, Policy.PCI)], False, (0, 600))
    redacted = replace(
        final, transcript=replace(final.transcript, text=out.text, tokens=out.tokens)
    )
    alt = alternative(redacted)
    assert alt["interpretations"][0]["transcript"] == "card [PCI] ok"
    words = word_confidences(alt)
    # The card's tokens were doubtful (e^-3); none of that shows, in the word or the mean.
    mean = (math.exp(-0.2) + math.exp(-0.4)) / 2
    assert alt["confidence"] == pytest.approx(mean, abs=1e-4)
    assert words == pytest.approx(
        {"card": math.exp(-0.2), "[PCI]": alt["confidence"], "ok": math.exp(-0.4)}, abs=1e-4
    )
    # Every word redacted: nothing scored is left, so 1.0.
    only = said((" 4111", -3.0), ("1111", -3.0), ("1111", -3.0), ("1111", -3.0))
    out = redact(
        only.transcript.text, only.transcript.tokens, [Found(0, 16, Policy.PCI)], False, (0, 400)
    )
    hidden = replace(only, transcript=replace(only.transcript, text=out.text, tokens=out.tokens))
    all_hidden = alternative(hidden)
    assert all_hidden["confidence"] == 1.0 and word_confidences(all_hidden) == {"[PCI]": 1.0}


def test_confidence_is_held_within_zero_and_one() -> None:
    # A log-probability over 0 (a backend's rounding) is certainty, never more.
    over = alternative(
        said(
            (" sure", 0.05),
        )
    )
    assert over["confidence"] == 1.0 and word_confidences(over) == {"sure": 1.0}
    # A vanishing one is 0, never less.
    alt = alternative(said((" sure", 0.0), (" doubt", -50.0)))
    assert word_confidences(alt) == {"sure": 1.0, "doubt": 0.0}
    assert alt["confidence"] == 0.5
