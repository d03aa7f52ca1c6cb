"""Hotword automaton: bonuses kept for completed phrases, withdrawn for broken ones."""

from __future__ import annotations

import math
import random
import tracemalloc
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.decoding import context_graph
from engine.decoding.context_graph import MAX_GRAPH_TOKENS, ROOT, ContextGraph, Phrase
from engine.errors import HotwordLimitError


def walk(graph: ContextGraph, tokens: Sequence[int]) -> tuple[list[float], list[int | None], int]:
    """Step bonuses, completed phrase per token, and the final state."""
    state = ROOT
    bonuses: list[float] = []
    ended: list[int | None] = []
    for token in tokens:
        bonus, state, phrase = graph.step(state, token)
        bonuses.append(bonus)
        ended.append(phrase)
    return bonuses, ended, state


def total(graph: ContextGraph, tokens: Sequence[int]) -> float:
    """What a finished hypothesis keeps: every step's bonus plus the final withdrawal."""
    bonuses, _, state = walk(graph, tokens)
    return sum(bonuses) + graph.finish(state)


def test_a_matched_phrase_earns_its_length_times_boost() -> None:
    graph = ContextGraph([Phrase((1, 2, 3), 2.0)])
    bonuses, ended, state = walk(graph, [1, 2, 3])
    assert bonuses == pytest.approx([2.0, 2.0, 2.0])
    assert ended == [None, None, 0]
    assert graph.finish(state) == 0.0
    assert total(graph, [7, 1, 2, 3, 8]) == pytest.approx(6.0)


def test_a_partial_match_then_a_mismatch_nets_zero() -> None:
    graph = ContextGraph([Phrase((1, 2, 3), 1.5)])
    bonuses, ended, state = walk(graph, [1, 2, 9])
    # The mismatch hands back what the two matched tokens earned.
    assert bonuses == pytest.approx([1.5, 1.5, -3.0])
    assert ended == [None, None, None]
    assert state == ROOT
    assert total(graph, [1, 2, 9, 4]) == 0.0


def test_a_mismatch_that_starts_the_phrase_again_keeps_the_new_start() -> None:
    graph = ContextGraph([Phrase((1, 2, 3), 1.0)])
    bonuses, _, _ = walk(graph, [1, 2, 1])
    assert bonuses == pytest.approx([1.0, 1.0, -1.0])
    assert total(graph, [1, 2, 1, 2, 3]) == pytest.approx(3.0)
    assert total(graph, [1, 1, 2, 3]) == pytest.approx(3.0)


def test_overlapping_phrases_both_match_through_the_fail_link() -> None:
    graph = ContextGraph([Phrase((1, 2, 3), 1.0), Phrase((2, 3, 4), 1.0)])
    _, ended, _ = walk(graph, [1, 2, 3, 4])
    assert ended == [None, None, 0, 1]
    assert total(graph, [1, 2, 3, 4]) == pytest.approx(6.0)
    assert total(graph, [1, 2, 3, 5]) == pytest.approx(3.0)
    assert total(graph, [1, 2, 4]) == 0.0


def test_a_phrase_that_is_a_suffix_of_another_matches_with_it() -> None:
    graph = ContextGraph([Phrase((1, 2, 3), 1.0), Phrase((2, 3), 1.0)])
    _, ended, _ = walk(graph, [1, 2, 3])
    assert ended == [None, None, 0]  # the longest phrase ending here is reported
    assert total(graph, [1, 2, 3]) == pytest.approx(5.0)
    assert total(graph, [2, 3]) == pytest.approx(2.0)


def test_a_phrase_inside_a_broken_longer_one_keeps_its_bonus() -> None:
    graph = ContextGraph([Phrase((1, 2, 3, 4), 1.0), Phrase((2, 3), 2.0)])
    _, ended, _ = walk(graph, [1, 2, 3, 9])
    assert ended == [None, None, 1, None]
    assert total(graph, [1, 2, 3, 9]) == pytest.approx(4.0)
    assert total(graph, [1, 2, 3, 4]) == pytest.approx(8.0)


def test_a_phrase_extended_by_a_longer_one_keeps_its_bonus_if_the_longer_fails() -> None:
    graph = ContextGraph([Phrase((1, 2), 1.0), Phrase((1, 2, 3), 1.0)])
    assert total(graph, [1, 2, 9]) == pytest.approx(2.0)
    assert total(graph, [1, 2]) == pytest.approx(2.0)
    assert total(graph, [1, 2, 3]) == pytest.approx(5.0)


def test_finish_withdraws_an_unfinished_match() -> None:
    graph = ContextGraph([Phrase((1, 2, 3), 1.25)])
    bonuses, _, state = walk(graph, [1, 2])
    assert graph.finish(state) == pytest.approx(-2.5)
    assert sum(bonuses) + graph.finish(state) == 0.0
    assert graph.finish(ROOT) == 0.0


def test_a_repeated_phrase_keeps_the_larger_boost() -> None:
    graph = ContextGraph([Phrase((1, 2), 1.0), Phrase((5,), 1.0), Phrase((1, 2), 3.0)])
    assert graph.phrases == (Phrase((1, 2), 3.0), Phrase((5,), 1.0))
    assert total(graph, [1, 2]) == pytest.approx(6.0)
    graph = ContextGraph([Phrase((1, 2), 3.0), Phrase((1, 2), 1.0)])
    assert graph.phrases == (Phrase((1, 2), 3.0),)


def test_phrases_sharing_a_prefix_each_earn_their_own_boost() -> None:
    graph = ContextGraph([Phrase((1, 3), 3.0), Phrase((1, 2), 1.0)])
    # A partial match is scored as the strongest phrase it could still become.
    assert graph.step(ROOT, 1)[0] == pytest.approx(3.0)
    assert total(graph, [1, 2]) == pytest.approx(2.0)
    assert total(graph, [1, 3]) == pytest.approx(6.0)
    assert graph.num_states == 4  # the shared first token is one state


def test_phrase_tokens_may_come_as_a_list() -> None:
    assert Phrase([4, 5], 1.0).tokens == (4, 5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tokens", "boost"),
    [
        ((), 1.0),
        ((1,), 0.0),
        ((1,), -1.0),
        ((1,), math.nan),
        ((1,), math.inf),
        ((-1, 2), 1.0),
        ((1.5,), 1.0),
        ((True,), 1.0),
    ],
)
def test_bad_phrases_are_refused(tokens: tuple[int, ...], boost: float) -> None:
    with pytest.raises(ValueError):
        Phrase(tokens, boost)


def test_an_empty_graph_never_gives_a_bonus() -> None:
    graph = ContextGraph([])
    assert graph.step(ROOT, 3) == (0.0, ROOT, None)
    assert graph.finish(ROOT) == 0.0


phrase_lists = st.lists(
    st.builds(
        Phrase,
        st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple),
        st.sampled_from([0.5, 1.0, 2.0, 3.0]),
    ),
    min_size=1,
    max_size=6,
)


def occurrences_bonus(phrases: Sequence[Phrase], tokens: Sequence[int]) -> float:
    """Brute force: every (overlapping) occurrence of every phrase earns len * boost."""
    bonus = 0.0
    for phrase in phrases:
        size = len(phrase.tokens)
        for start in range(len(tokens) - size + 1):
            if tuple(tokens[start : start + size]) == phrase.tokens:
                bonus += size * phrase.boost
    return bonus


@settings(max_examples=300, deadline=None)
@given(phrase_lists, st.lists(st.integers(0, 5), max_size=16))
def test_bonus_kept_equals_the_phrases_found_by_brute_force(
    phrases: list[Phrase], tokens: list[int]
) -> None:
    graph = ContextGraph(phrases)
    state, running = ROOT, 0.0
    for end, token in enumerate(tokens, start=1):
        assert graph.max_bonus(state) >= graph.step(state, token)[0] - 1e-9
        bonus, state, _ = graph.step(state, token)
        running += bonus
        # At every point, what is kept once partial matches are withdrawn is exactly the
        # phrases completed so far; the partial match's bonus is never negative.
        kept = occurrences_bonus(graph.phrases, tokens[:end])
        assert running + graph.finish(state) == pytest.approx(kept)
        assert graph.finish(state) <= 0.0
    assert graph.num_states <= 1 + sum(len(p.tokens) for p in graph.phrases)


@settings(max_examples=100, deadline=None)
@given(phrase_lists)
def test_max_bonus_bounds_every_step_from_every_state(phrases: list[Phrase]) -> None:
    graph = ContextGraph(phrases)
    for state in range(graph.num_states):
        best = max(graph.step(state, token)[0] for token in range(7))
        assert best <= graph.max_bonus(state) + 1e-9


def hub_and_runs(branches: int, runs: int, length: int) -> list[Phrase]:
    """The densest list for a graph that tabulates every state's transitions: many phrases
    branching off one hub token, and long runs of the hub after distinct first tokens.

    Every state of a run falls back to the hub, so a table per state repeats every branch:
    a bound in tokens alone bounds nothing unless the graph grows with its tokens.
    """
    hub = 1
    branching = [Phrase((hub, 1000 + j), 1.0) for j in range(branches)]
    long_runs = [Phrase((5000 + i, *(hub,) * (length - 1)), 1.0) for i in range(runs)]
    return branching + long_runs


def test_a_graph_takes_memory_in_proportion_to_its_tokens() -> None:
    phrases = hub_and_runs(250, 240, 64)
    tokens = sum(len(p.tokens) for p in phrases)
    tracemalloc.start()
    try:
        graph = ContextGraph(phrases)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # 15,860 tokens: tabulated per state, this graph held 135 MiB (8.9 KB a token).
    assert held < 512 * tokens, f"{held / 2**20:.1f} MiB for {tokens} tokens"
    assert graph.num_states == 1 + 1 + 250 + 240 * 64  # the branches share the hub's state
    # It still matches what it should: a run earns its bonus, a branch earns its own.
    run = phrases[-1].tokens
    assert total(graph, [7, *run, 7]) == pytest.approx(64.0)
    assert total(graph, [5000, 1, 1, 1005]) == pytest.approx(2.0)


def test_a_graph_holds_up_to_its_token_cap_and_refuses_one_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    full = [Phrase((5000 + i, *range(1000, 1063)), 1.0) for i in range(MAX_GRAPH_TOKENS // 64)]
    assert sum(len(p.tokens) for p in full) == MAX_GRAPH_TOKENS
    assert ContextGraph([*full, *full]).num_states == 1 + MAX_GRAPH_TOKENS  # repeats: once

    # One token more is refused by its count, before the trie is built.
    def never(phrases: Sequence[Phrase]) -> None:
        pytest.fail(f"a trie was built for {len(phrases)} phrases over the cap")

    monkeypatch.setattr(context_graph, "_build_trie", never)
    with pytest.raises(HotwordLimitError, match=f"of {MAX_GRAPH_TOKENS + 1} tokens; at most"):
        ContextGraph([*full, Phrase((7,), 1.0)])
    with pytest.raises(HotwordLimitError, match="2 phrases make a context graph of 3 tokens"):
        ContextGraph([Phrase((1, 2), 1.0), Phrase((3,), 1.0)], max_tokens=2)


def random_phrases(count: int, seed: int) -> list[Phrase]:
    """Phrases like a tokenizer's: 1 to 16 ids from a 25,000-piece vocabulary."""
    rng = random.Random(seed)
    return [
        Phrase(tuple(rng.randrange(25_000) for _ in range(rng.randint(1, 16))), 2.0)
        for _ in range(count)
    ]


@pytest.mark.parametrize(
    "make",
    [lambda: hub_and_runs(250, 240, 64), lambda: random_phrases(1000, seed=3)],
    ids=["hub-and-runs", "random"],
)
def test_a_graph_s_estimated_size_is_the_memory_it_holds(
    make: Callable[[], list[Phrase]],
) -> None:
    tracemalloc.start()
    try:
        graph = ContextGraph(make())  # the phrases it keeps are its own
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 0.8 * held <= graph.nbytes <= 1.25 * held
