"""A file's speakers clustered at its end: voices grouped whatever their order, the
speaker count bounds, short voices joining the nearest speaker, and known speakers named."""

from __future__ import annotations

import numpy as np

from engine.types import Transcript
from streaming.events import Final, SpeakerTurn
from streaming.speakers.labels import Voice
from streaming.speakers.offline import KnownSpeaker, cluster, relabel
from streaming.speakers.online import SpeakerPolicy
from tests.streaming.speakers.vectors import utterance, voices

SR = 16000


def test_interleaved_voices_are_grouped_and_numbered_by_first_appearance() -> None:
    rng = np.random.default_rng(0)
    vs = voices(3, 1)
    order = [2, 0, 2, 1, 0, 0, 1, 2, 1]
    got = cluster(
        np.stack([utterance(vs[k], rng) for k in order]), [2.0] * 9, SpeakerPolicy(), None
    )
    first = {k: n for n, k in reversed(list(enumerate(dict.fromkeys(order))))}
    assert got == [first[k] for k in order]


def test_the_count_bounds_cut_the_tree_at_that_many_speakers() -> None:
    rng = np.random.default_rng(2)
    a, b, c = voices(3, 3)
    close = (a + 0.6 * b) / np.linalg.norm(a + 0.6 * b)  # cosine 0.86 to a: one speaker
    order = [a, close, a, close, c, c]
    vectors = np.stack([utterance(v, rng, 0.2) for v in order])
    assert cluster(vectors, [2.0] * 6, SpeakerPolicy(), None) == [0, 0, 0, 0, 1, 1]
    assert cluster(vectors, [2.0] * 6, SpeakerPolicy(), 3) == [0, 1, 0, 1, 2, 2]
    assert cluster(vectors, [2.0] * 6, SpeakerPolicy(max_speakers=1), None) == [0] * 6


def test_a_short_voice_joins_the_nearest_speaker() -> None:
    rng = np.random.default_rng(4)
    a, b = voices(2, 5)
    vectors = np.stack([utterance(a, rng), utterance(b, rng), utterance(b, rng), utterance(a, rng)])
    # The third is short: clustered without it, then put with b.
    assert cluster(vectors, [2.0, 2.0, 0.4, 2.0], SpeakerPolicy(), None) == [0, 1, 1, 0]
    # Alone and short, a voice is still a speaker.
    assert cluster(vectors[:1], [0.4], SpeakerPolicy(), None) == [0]


def final(utt: int, start_ms: int, end_ms: int) -> Final:
    t = Transcript(f"u{utt}", "en", "neutral", "speech", True, f"u{utt}")
    return Final(utt, start_ms, end_ms, t)


def voice(start_ms: int, end_ms: int, vector: np.ndarray) -> Voice:
    return Voice(start_ms * SR // 1000, end_ms * SR // 1000, vector)


def test_relabel_rewrites_each_finals_speaker_and_turns_and_names_known_speakers() -> None:
    rng = np.random.default_rng(6)
    a, b, c = voices(3, 7)
    finals = [final(0, 0, 2000), final(1, 3000, 6000), final(2, 7000, 9000)]
    kept = [
        (0, voice(0, 2000, utterance(a, rng))),
        (1, voice(3000, 4000, utterance(b, rng))),  # a change of speaker inside utterance 1
        (1, voice(4000, 6000, utterance(c, rng))),
        (2, voice(7000, 9000, utterance(a, rng))),
    ]
    plain = relabel(finals, kept, SpeakerPolicy(min_new_s=0.5))
    assert [f.speaker for f in plain] == ["S1", "S3", "S1"]
    assert plain[1].speaker_turns == (SpeakerTurn("S2", 3000, 4000), SpeakerTurn("S3", 4000, 6000))
    known = [
        KnownSpeaker("agent", utterance(c, rng, 0.3)),
        KnownSpeaker("stranger", voices(1, 9)[0]),
    ]
    named = relabel(finals, kept, SpeakerPolicy(min_new_s=0.5), known=known)
    # c is the agent; the stranger is like no one; the others are numbered apart.
    assert [t.speaker for t in named[1].speaker_turns] == ["S2", "agent"]
    assert [f.speaker for f in named] == ["S1", "agent", "S1"]
    assert relabel(finals, [], SpeakerPolicy()) == finals
