"""What the resume tests share: a minute of speech."""

from __future__ import annotations

import pytest

from tests.speech import Clip, sentences_apart, to_s16le


@pytest.fixture(scope="module")
def speech(speech_clips: list[Clip]) -> bytes:
    """About a minute of English sentences, each followed by a second of quiet."""
    return to_s16le(sentences_apart(speech_clips, 60.0))
