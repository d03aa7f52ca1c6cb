"""Settled partial text: bounded re-decodes that lose and repeat nothing."""

from __future__ import annotations

import numpy as np
import pytest

from engine.types import DecodeOptions, InferenceRequest, RequestKind, Token, Transcript
from streaming.partials.window import PartialWindow
from tests.streaming.fakes import word_transcript, words_between

SR = 16000


def decode(begin: int, end: int) -> Transcript:
    audio = np.zeros(end - begin, np.float32)
    request = InferenceRequest("s", 0, RequestKind.PARTIAL, audio, DecodeOptions(), 0.0, begin)
    return word_transcript(request)


def transcript(tokens: list[Token]) -> Transcript:
    text = "".join(t.text for t in tokens).strip()
    return Transcript(text, "en", "neutral", "speech", True, text, tuple(tokens))


@pytest.mark.parametrize("utt_start_ms", [0, 1234])
def test_windowed_partials_say_what_a_whole_decode_says(utt_start_ms: int) -> None:
    start = utt_start_ms * SR // 1000
    window = PartialWindow(start, hold_ms=2000, context_ms=500)
    widest = 0
    for end in range(start + SR // 2, start + 30 * SR, 400 * SR // 1000):
        begin = window.window_start()
        widest = max(widest, end - begin)
        text = window.accept(begin, end, decode(begin, end))
        assert text == words_between(utt_start_ms, end * 1000 // SR)
    # Hold + one interval + context, plus at most a word gap where the boundary sits.
    assert widest <= (2000 + 400 + 500 + 300) * SR // 1000
    assert window.boundary > start + 25 * SR


def test_without_hold_every_partial_is_the_whole_utterance() -> None:
    window = PartialWindow(800, hold_ms=0, context_ms=500)
    for end in (SR, 5 * SR, 9 * SR):
        assert window.window_start() == 800
        assert window.accept(800, end, decode(800, end)) == decode(800, end).text


def test_a_whole_decode_replaces_the_settled_text() -> None:
    window = PartialWindow(0, hold_ms=1000, context_ms=500)
    window.accept(0, 4 * SR, decode(0, 4 * SR))
    assert window.window_start() > 0
    # An early decode of the whole utterance heard more context: it wins outright.
    redo = transcript([Token(7, " other", 100, 300), Token(8, " words", 3500, 3700)])
    assert window.accept(0, 5 * SR, redo) == "other words"


def test_a_window_cannot_rewrite_settled_text() -> None:
    window = PartialWindow(0, hold_ms=1000, context_ms=500)
    window.accept(0, 4 * SR, decode(0, 4 * SR))
    settled_ms = window.boundary * 1000 // SR
    begin = window.window_start()
    begin_ms = begin * 1000 // SR
    # The window's context hears a different word before the boundary: it is not shown.
    noisy = [Token(99, " junk", 0, (settled_ms - begin_ms) // 2)]
    noisy += list(decode(window.boundary, 5 * SR).tokens)
    shift = (window.boundary - begin) * 1000 // SR
    noisy = noisy[:1] + [
        Token(t.id, t.text, t.start_ms + shift, t.end_ms + shift) for t in noisy[1:]
    ]
    text = window.accept(begin, 5 * SR, transcript(noisy))
    assert "junk" not in text
    assert text == words_between(0, 5000)


def test_silence_moves_the_boundary_without_settling_words() -> None:
    window = PartialWindow(0, hold_ms=1000, context_ms=500)
    assert window.accept(0, 3 * SR, transcript([])) == ""
    assert window.boundary > 0
    assert window.window_start() == window.boundary - SR // 2


def shifted(t: Transcript, ms: int) -> Transcript:
    return transcript([Token(k.id, k.text, k.start_ms + ms, k.end_ms + ms) for k in t.tokens])


@pytest.mark.parametrize("jitter_ms", [-40, 40])
def test_a_token_that_moves_a_little_between_decodes_is_neither_lost_nor_doubled(
    jitter_ms: int,
) -> None:
    # Words sit 100 ms apart; the boundary goes midway, so a 40 ms shift stays on its side.
    # The hold ends inside a word (w10 at 3050..3250 ms), which is left unsettled.
    window = PartialWindow(0, hold_ms=1000, context_ms=500)
    first = 4100 * SR // 1000
    window.accept(0, first, decode(0, first))
    begin = window.window_start()
    text = window.accept(begin, 5 * SR, shifted(decode(begin, 5 * SR), jitter_ms))
    assert text == words_between(0, 5000)
