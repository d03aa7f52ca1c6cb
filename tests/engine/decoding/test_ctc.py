"""Greedy CTC collapse: hand examples and a property test against a naive reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.decoding.ctc import CtcTokens, greedy_collapse


def naive_collapse(frames: list[int], blank_id: int) -> CtcTokens:
    """Frame-by-frame reference: one token per run of a non-blank id."""
    ids: list[int] = []
    firsts: list[int] = []
    lasts: list[int] = []
    previous: int | None = None
    for frame, token_id in enumerate(frames):
        if token_id == blank_id:
            pass
        elif token_id == previous:
            lasts[-1] = frame
        else:
            ids.append(token_id)
            firsts.append(frame)
            lasts.append(frame)
        previous = token_id
    return CtcTokens(tuple(ids), tuple(firsts), tuple(lasts))


def collapse(frames: list[int], blank_id: int = 0) -> CtcTokens:
    return greedy_collapse(np.array(frames, dtype=np.int64), blank_id)


def test_repeats_collapse_to_one_token_spanning_the_run() -> None:
    assert collapse([5, 5, 5, 7]) == CtcTokens((5, 7), (0, 3), (2, 3))


def test_blanks_are_dropped_and_split_runs() -> None:
    assert collapse([0, 5, 5, 0, 0, 7, 0]) == CtcTokens((5, 7), (1, 5), (2, 5))


def test_blank_between_repeats_keeps_two_tokens() -> None:
    assert collapse([5, 0, 5]) == CtcTokens((5, 5), (0, 2), (0, 2))


def test_all_blank_gives_nothing() -> None:
    assert collapse([0, 0, 0]) == CtcTokens((), (), ())


def test_empty_gives_nothing() -> None:
    assert collapse([]) == CtcTokens((), (), ())
    assert greedy_collapse(np.array([])) == CtcTokens((), (), ())


def test_single_frame() -> None:
    assert collapse([9]) == CtcTokens((9,), (0,), (0,))


def test_other_blank_id() -> None:
    assert collapse([0, 0, 3, 3, 0], blank_id=3) == CtcTokens((0, 0), (0, 4), (1, 4))


def test_returns_plain_python_ints() -> None:
    tokens = greedy_collapse(np.array([1, 2], dtype=np.int32))
    assert all(type(v) is int for v in tokens.ids + tokens.first_frame + tokens.last_frame)


def test_rejects_two_dimensional_input() -> None:
    with pytest.raises(ValueError, match="one-dimensional"):
        greedy_collapse(np.zeros((2, 3), dtype=np.int64))


def test_rejects_float_input() -> None:
    with pytest.raises(ValueError, match="integers"):
        greedy_collapse(np.array([1.0, 2.0]))


@given(
    frames=st.lists(st.integers(min_value=0, max_value=4), max_size=60),
    blank_id=st.integers(min_value=0, max_value=4),
)
def test_matches_naive_reference(frames: list[int], blank_id: int) -> None:
    assert collapse(frames, blank_id) == naive_collapse(frames, blank_id)
