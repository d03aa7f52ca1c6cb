"""Issue 19's acceptance: word error rate through every way into the server.

Four files of held-out demo sentences go through every protocol endpoint at once, at
real-time pace with the real VAD, on one server. A wideband (16 kHz) path must stay near
the offline decode (`WIDEBAND_MARGIN`; each sentence decoded alone, see conftest's
`WHOLE_FILE`), an 8 kHz μ-law path within 3 points of v1 at 16 kHz, and the offline
decode itself under an absolute bound, which is what a broken frontend (CMVN) fails: it
moves offline and streaming alike.
"""

from __future__ import annotations

import asyncio

import pytest

from engine.decoding.recognizer import Recognizer
from sensestream.client import pcm16, run_session
from tests.accuracy.conftest import Decoded, Streamed, served_backend, through
from tests.accuracy.corpus import AudioFile
from tests.accuracy.paths import DRIVERS, NARROWBAND, WIDEBAND
from tests.server.conftest import ServerProcess

#: The demo model (8,400 steps) decodes these sentences offline at 4 % WER; a broken
#: frontend (a swapped CMVN) moves offline and streaming alike, and only this bound sees it.
MAX_OFFLINE_WER = 0.10
#: As asked: each 16 kHz path within 1 point of the offline decode (measured: 3 to 4 %
#: against 4 %; one point is one word of the set's 100).
WIDEBAND_MARGIN = 0.01
#: As asked: the μ-law paths are within 3 points of v1 at 16 kHz (measured: equal, 4 %).
NARROWBAND_MARGIN = 0.03
#: As asked (issue 49): with text committed at the pauses, each path within half a point
#: of whole-utterance decoding on the same path.
COMMIT_MARGIN = 0.005


def report(name: str, got: Decoded, against: str, reference: Decoded, margin: float) -> str:
    return (
        f"{name} WER {got.wer:.4f} > {against} WER {reference.wer:.4f} + {margin}\n"
        f"{name}:\n{got.texts()}\n{against}:\n{reference.texts()}"
    )


def test_the_server_runs_the_offline_decodes_model_and_backend(
    server: ServerProcess, recognizer: Recognizer
) -> None:
    model, backend = served_backend(server)
    assert (model, backend) == (str(recognizer.model_dir.path), recognizer.backend.name)


def test_offline_wer_is_within_the_bound(offline: Decoded) -> None:
    found = offline.wer
    assert found <= MAX_OFFLINE_WER, (
        f"offline WER {found:.4f} > {MAX_OFFLINE_WER}\n{offline.texts()}"
    )


@pytest.mark.parametrize("path", list(WIDEBAND))
def test_a_16khz_path_is_within_a_point_of_offline(
    path: str, streamed: Streamed, offline: Decoded
) -> None:
    wide = through(streamed, path)
    got, bound = wide.wer, offline.wer + WIDEBAND_MARGIN
    assert got <= bound, report(path, wide, "offline", offline, WIDEBAND_MARGIN)


@pytest.mark.parametrize("path", list(NARROWBAND))
def test_an_8khz_mulaw_path_is_within_3_points_of_v1_at_16khz(
    path: str, streamed: Streamed
) -> None:
    narrow, wide = through(streamed, path), through(streamed, "v1-16k")
    got, bound = narrow.wer, wide.wer + NARROWBAND_MARGIN
    assert got <= bound, report(path, narrow, "v1-16k", wide, NARROWBAND_MARGIN)


def test_the_committing_server_commits_each_files_sentences_inside_one_utterance(
    committing_server: ServerProcess, test_set: list[AudioFile]
) -> None:
    """What the next test compares is text committed at pauses: a file is one utterance
    whose sentences are committed one by one."""
    audio = pcm16(test_set[0].audio)
    outcome = asyncio.run(run_session(committing_server.url, audio, start={"type": "start"}))
    finals = [e for e in outcome.of("final") if e["text"]]
    assert len(finals) == 1 and len(outcome.of("committed")) >= 3, outcome.events


@pytest.mark.parametrize("path", list(DRIVERS))
def test_committing_at_pauses_is_within_half_a_point_of_whole_utterances(
    path: str, streamed_committing: Streamed, streamed: Streamed
) -> None:
    got, whole = through(streamed_committing, path), through(streamed, path)
    bound = whole.wer + COMMIT_MARGIN
    assert got.wer <= bound, report(path, got, "whole utterances", whole, COMMIT_MARGIN)
