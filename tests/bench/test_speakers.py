"""The speaker benchmark's conversations and scoring, without a server."""

from __future__ import annotations

import itertools
import random

from pyannote.core import Annotation, Segment

from tools.bench.speakers import GAP_S, TURN_S, Conversation, conversation, der, named_right
from tools.demo_model.texts import held_out
from tools.speech import SAMPLE_RATE


def test_a_conversation_changes_speaker_at_each_turn_with_quiet_between() -> None:
    texts = iter(s.spoken for s in held_out(3, 60))
    conv: Conversation = conversation(random.Random(3), texts)
    turns = conv.turns
    assert 2 <= len(conv.speakers) <= 4 and 6 <= len(turns) <= 12
    assert all(a.speaker != b.speaker for a, b in itertools.pairwise(turns))
    for a, b in itertools.pairwise(turns):
        gap = (b.start - a.end) / SAMPLE_RATE
        assert GAP_S[0] - 0.01 <= gap <= GAP_S[1] + 0.01  # no overlap
    assert all(TURN_S[0] <= (t.end - t.start) / SAMPLE_RATE <= TURN_S[1] for t in turns)
    assert turns[-1].end < conv.audio.size
    assert {name for name, _ in conv.references} == conv.speakers


def annotation(*spans: tuple[float, float, str]) -> Annotation:
    out = Annotation()
    for start, end, label in spans:
        out[Segment(start, end)] = label
    return out


def test_der_maps_labels_and_forgives_a_quarter_second_at_each_boundary() -> None:
    reference = annotation((0, 4, "alice"), (5, 9, "bob"))
    assert der(reference, annotation((0.2, 4.2, "B"), (5.1, 9, "A"))) == 0.0
    merged = der(reference, annotation((0, 4, "A"), (5, 9, "A")))
    assert 0.4 < merged < 0.6  # half the speech given to the wrong speaker


def test_a_named_segment_is_right_when_its_name_spoke_most_of_it() -> None:
    reference = annotation((0, 4, "alice"), (5, 9, "bob"))
    hypothesis = annotation((0, 4.5, "alice"), (4.5, 9, "alice"))
    assert named_right(reference, hypothesis) == (1, 2)
