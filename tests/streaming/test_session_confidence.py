"""Confidence in the session: every decode a final is made of asks for it (the server's
choice, unless the stream makes its own); partials never do."""

from __future__ import annotations

import pytest

from engine.types import RequestKind
from streaming.audio.decoder import AudioFormat
from streaming.commands import Configure, StreamOptions
from streaming.pieces.policy import CommitPolicy
from streaming.segmenter import SegmenterConfig
from streaming.session import Session, SessionConfig
from streaming.vad.types import VadConfig
from tests.streaming.fakes import EnergyVadModel
from tests.streaming.speakers.test_session_speakers import CHANGING, TURNS, run


def session(server: bool, stream: bool | None, commits: CommitPolicy) -> Session:
    config = SessionConfig(
        vad=VadConfig(end_silence_ms=500),
        segmenter=SegmenterConfig(preroll_ms=0),
        commits=commits,
        confidence=server,
    )
    s = Session("s", config, EnergyVadModel())
    s.handle(Configure(AudioFormat(), StreamOptions(confidence=stream)), 0.0)
    return s


@pytest.mark.parametrize("mode", ["off", "pauses"])
def test_finals_and_pieces_ask_for_confidence_and_partials_never(mode: str) -> None:
    turns = CHANGING if mode == "pauses" else TURNS
    _, asked = run(session(True, None, CommitPolicy(mode)), turns, 8.5)
    kinds = {r.kind for r in asked}
    assert RequestKind.PARTIAL in kinds and len(kinds) > 1  # finals (or early finals) too
    assert {r.options.confidence for r in asked if r.kind is RequestKind.PARTIAL} == {False}
    assert all(r.options.confidence for r in asked if r.kind is not RequestKind.PARTIAL)


@pytest.mark.parametrize(
    ("server", "stream", "asks"),
    [(True, None, True), (False, None, False), (True, False, False), (False, True, True)],
)
def test_a_stream_may_choose_otherwise_than_the_server(
    server: bool, stream: bool | None, asks: bool
) -> None:
    _, asked = run(session(server, stream, CommitPolicy()), TURNS, 8.5)
    finals = [r for r in asked if r.kind is not RequestKind.PARTIAL]
    assert finals and {r.options.confidence for r in finals} == {asks}
