"""CTC prefix beam search: against greedy, brute force, a plain reference, and hotwords."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.decoding.beam_search import prefix_beam_search
from engine.decoding.context_graph import ROOT, ContextGraph, Phrase
from engine.decoding.ctc import CtcTokens, greedy_collapse

NEG_INF = -math.inf
BLANK, A, B, C = 0, 1, 2, 3

TopK = tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]


def topk(frames: Sequence[Mapping[int, float]]) -> TopK:
    """[T, K] arrays from per-frame {token: probability}, likeliest first."""
    rows = [sorted(frame.items(), key=lambda item: -item[1]) for frame in frames]
    ids = np.array([[token for token, _ in row] for row in rows], dtype=np.int32)
    logprobs = np.log(np.array([[p for _, p in row] for row in rows], dtype=np.float64))
    return ids, logprobs.astype(np.float32)


def random_topk(seed: int, frames: int, k: int, vocab: int) -> TopK:
    """Random softmax frames over `vocab` ids, cut to their top k."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=2.0, size=(frames, vocab))
    logprobs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    ids = np.argsort(-logprobs, axis=1)[:, :k]
    return ids.astype(np.int32), np.take_along_axis(logprobs, ids, axis=1).astype(np.float32)


def logaddexp(a: float, b: float) -> float:
    return float(np.logaddexp(a, b))


def context_total(graph: ContextGraph | None, tokens: Sequence[int]) -> float:
    """The bonus a finished hypothesis with these tokens keeps."""
    if graph is None:
        return 0.0
    state, bonus = ROOT, 0.0
    for token in tokens:
        step, state, _ = graph.step(state, token)
        bonus += step
    return bonus + graph.finish(state)


def sequence_scores(
    ids: npt.NDArray[np.int32], logprobs: npt.NDArray[np.float32]
) -> dict[tuple[int, ...], float]:
    """Brute force: log p of every collapsed sequence, summed over all top-K alignments."""
    scores: dict[tuple[int, ...], float] = {}
    rows = list(zip(ids.tolist(), logprobs.tolist(), strict=True))
    for path in itertools.product(*(range(len(row_ids)) for row_ids, _ in rows)):
        frame_ids = [rows[t][0][k] for t, k in enumerate(path)]
        logp = sum(rows[t][1][k] for t, k in enumerate(path))
        tokens = greedy_collapse(np.array(frame_ids)).ids
        scores[tokens] = logaddexp(scores.get(tokens, NEG_INF), logp)
    return scores


def reference_search(
    ids: npt.NDArray[np.int32],
    logprobs: npt.NDArray[np.float32],
    beam: int,
    graph: ContextGraph | None,
) -> tuple[int, ...]:
    """Textbook prefix beam search on token tuples: no cutoffs, no interning."""
    hyps: dict[tuple[int, ...], tuple[float, float]] = {(): (0.0, NEG_INF)}
    for row_ids, row_logprobs in zip(ids.tolist(), logprobs.tolist(), strict=True):
        grown: dict[tuple[int, ...], list[float]] = {}
        for prefix, (p_b, p_nb) in hyps.items():
            for token, logp in zip(row_ids, row_logprobs, strict=True):
                if token == BLANK:
                    add_path(grown, prefix, 0, logaddexp(p_b, p_nb) + logp)
                elif prefix and token == prefix[-1]:
                    add_path(grown, prefix, 1, p_nb + logp)
                    add_path(grown, (*prefix, token), 1, p_b + logp)
                else:
                    add_path(grown, (*prefix, token), 1, logaddexp(p_b, p_nb) + logp)
        ranked = sorted(
            grown.items(),
            key=lambda item: logaddexp(*item[1]) + context_partial(graph, item[0]),
            reverse=True,
        )
        hyps = {prefix: (p_b, p_nb) for prefix, (p_b, p_nb) in ranked[:beam]}
    return max(hyps, key=lambda p: logaddexp(*hyps[p]) + context_total(graph, p))


def add_path(
    grown: dict[tuple[int, ...], list[float]], prefix: tuple[int, ...], kind: int, logp: float
) -> None:
    """Sum a path into the prefix's blank-ending (0) or token-ending (1) probability."""
    slot = grown.setdefault(prefix, [NEG_INF, NEG_INF])
    slot[kind] = logaddexp(slot[kind], logp)


def context_partial(graph: ContextGraph | None, tokens: Sequence[int]) -> float:
    """The context score during the search: partial matches not yet withdrawn."""
    if graph is None:
        return 0.0
    return context_total(graph, tokens) - graph.finish(walk_state(graph, tokens))


def walk_state(graph: ContextGraph, tokens: Sequence[int]) -> int:
    state = ROOT
    for token in tokens:
        _, state, _ = graph.step(state, token)
    return state


def search(frames: TopK, beam: int = 4, graph: ContextGraph | None = None) -> CtcTokens:
    return prefix_beam_search(frames[0], frames[1], beam=beam, graph=graph)


# --- Small hand-made cases -------------------------------------------------------------


def test_blank_only_gives_no_tokens() -> None:
    frames = topk([{BLANK: 0.9, A: 0.1}] * 5)
    assert search(frames) == CtcTokens((), (), ())


def test_no_frames_give_no_tokens() -> None:
    ids = np.zeros((0, 3), dtype=np.int32)
    assert prefix_beam_search(ids, ids.astype(np.float32), beam=4, graph=None).ids == ()


def test_a_repeat_separated_by_a_blank_is_two_tokens() -> None:
    frames = topk([{A: 0.9, BLANK: 0.1}, {BLANK: 0.9, A: 0.1}, {A: 0.9, BLANK: 0.1}])
    assert search(frames) == CtcTokens((A, A), (0, 2), (0, 2))


def test_a_run_is_one_token_spanning_the_run_shifted_by_the_offset() -> None:
    ids, logprobs = topk(
        [{BLANK: 0.9, A: 0.1}, {A: 0.8, BLANK: 0.2}, {A: 0.8, BLANK: 0.2}, {B: 0.9, BLANK: 0.1}]
    )
    result = prefix_beam_search(ids, logprobs, beam=4, graph=None, frame_offset=4)
    assert result == CtcTokens((A, B), (5, 7), (6, 7))


def test_beam_search_sums_alignments_so_beam_one_can_differ_from_greedy() -> None:
    # Frame 1's argmax is C, but "A" continued (by blank or by A) holds 0.6 of the mass
    # against 0.4 for "A C": prefix search keeps "A". This is the intended difference.
    frames = topk([{A: 0.9, BLANK: 0.05, B: 0.05}, {C: 0.4, BLANK: 0.3, A: 0.3}])
    assert greedy_collapse(frames[0][:, 0]).ids == (A, C)
    assert search(frames, beam=1).ids == (A,)


def test_a_hotword_turns_the_greedy_token_into_the_phrase() -> None:
    frames = topk([{A: 0.5, B: 0.4, BLANK: 0.1}, {A: 0.5, C: 0.4, BLANK: 0.1}])
    assert search(frames, beam=4).ids == (A,)
    graph = ContextGraph([Phrase((B, C), 1.0)])
    for beam in (1, 4):
        assert search(frames, beam=beam, graph=graph).ids == (B, C)
    # Too small a boost does not override the acoustics.
    assert search(frames, beam=4, graph=ContextGraph([Phrase((B, C), 0.2)])).ids == (A,)


def test_a_half_present_hotword_is_not_inserted() -> None:
    # B is plausible and the boost puts "B" ahead after frame 0, but C never is: once
    # frame 1 breaks the match, its bonus is withdrawn and the unbiased answer wins.
    frames = topk([{A: 0.5, B: 0.45, BLANK: 0.05}, {A: 0.9, BLANK: 0.05, C: 0.05}])
    unbiased = search(frames, beam=4)
    assert unbiased.ids == (A,)
    graph = ContextGraph([Phrase((B, C), 1.0)])
    assert search(frames, beam=4, graph=graph) == unbiased
    # The partial bonus did act: with a single hypothesis it pruned "A" at frame 0, and the
    # later withdrawal cannot bring a pruned prefix back.
    assert search(frames, beam=1, graph=graph).ids == (B, A)


def test_an_unfinished_hotword_at_the_end_is_withdrawn() -> None:
    # The last frame starts the phrase; nothing after it can finish it.
    frames = topk([{A: 0.5, B: 0.45, BLANK: 0.05}])
    graph = ContextGraph([Phrase((B, C), 1.0)])
    assert search(frames, beam=4, graph=graph).ids == (A,)


def test_bad_arguments_are_refused() -> None:
    ids, logprobs = topk([{A: 0.5, B: 0.5}])
    with pytest.raises(ValueError):
        prefix_beam_search(ids, logprobs, beam=0, graph=None)
    with pytest.raises(ValueError):
        prefix_beam_search(ids[0], logprobs[0], beam=1, graph=None)
    with pytest.raises(ValueError):
        prefix_beam_search(ids, logprobs[:, :1], beam=1, graph=None)
    with pytest.raises(ValueError):
        prefix_beam_search(np.array([[A, A]], dtype=np.int32), logprobs, beam=1, graph=None)


# --- Properties --------------------------------------------------------------------------


@st.composite
def peaky_frames(draw: st.DrawFn) -> TopK:
    """Frames whose argmax holds nearly all the mass, with distinct runner-up ids."""
    count = draw(st.integers(1, 30))
    k = draw(st.integers(1, 4))
    ids, logprobs = [], []
    for _ in range(count):
        row = draw(st.permutations(range(6)))[:k]
        rest = [draw(st.floats(-30.0, -12.0)) for _ in range(k - 1)]
        top = math.log1p(-sum(math.exp(lp) for lp in rest))
        ids.append(row)
        logprobs.append([top, *rest])
    return np.array(ids, dtype=np.int32), np.array(logprobs, dtype=np.float32)


@settings(max_examples=200, deadline=None)
@given(peaky_frames(), st.integers(1, 4), st.integers(0, 8))
def test_matches_greedy_when_the_argmax_path_dominates(
    frames: TopK, beam: int, offset: int
) -> None:
    result = prefix_beam_search(frames[0], frames[1], beam=beam, graph=None, frame_offset=offset)
    greedy = greedy_collapse(frames[0][:, 0])
    shifted = CtcTokens(
        greedy.ids,
        tuple(f + offset for f in greedy.first_frame),
        tuple(f + offset for f in greedy.last_frame),
    )
    assert result == shifted


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=20),
    st.lists(st.floats(-5.0, 0.0), min_size=20, max_size=20),
    st.integers(1, 4),
)
def test_a_single_candidate_per_frame_is_exactly_greedy(
    path: list[int], logprobs: list[float], beam: int
) -> None:
    ids = np.array(path, dtype=np.int32)[:, None]
    values = np.array(logprobs[: len(path)], dtype=np.float32)[:, None]
    assert prefix_beam_search(ids, values, beam=beam, graph=None) == greedy_collapse(ids[:, 0])


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(1, 3))
def test_unpruned_search_finds_the_best_sequence_never_worse_than_greedy(
    seed: int, frames: int, k: int
) -> None:
    ids, logprobs = random_topk(seed, frames, k, vocab=4)
    scores = sequence_scores(ids, logprobs)
    best = prefix_beam_search(ids, logprobs, beam=10_000, graph=None).ids
    greedy = greedy_collapse(ids[:, 0]).ids
    assert scores[best] == pytest.approx(max(scores.values()), abs=1e-9)
    assert scores[best] >= scores[greedy] - 1e-9


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(1, 3))
def test_unpruned_biased_search_maximises_acoustics_plus_kept_bonus(
    seed: int, frames: int, k: int
) -> None:
    ids, logprobs = random_topk(seed, frames, k, vocab=4)
    graph = ContextGraph([Phrase((1, 2), 0.7), Phrase((2, 3, 1), 1.1), Phrase((3,), 0.3)])
    scores = {s: v + context_total(graph, s) for s, v in sequence_scores(ids, logprobs).items()}
    best = prefix_beam_search(ids, logprobs, beam=10_000, graph=graph).ids
    assert scores[best] == pytest.approx(max(scores.values()), abs=1e-9)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 25),
    st.integers(1, 5),
    st.integers(1, 6),
    st.booleans(),
)
def test_matches_a_plain_reference_implementation(
    seed: int, frames: int, k: int, beam: int, biased: bool
) -> None:
    ids, logprobs = random_topk(seed, frames, k, vocab=6)
    graph = (
        ContextGraph([Phrase((1, 2), 1.0), Phrase((2, 3, 4), 0.8), Phrase((5,), 0.4)])
        if biased
        else None
    )
    result = prefix_beam_search(ids, logprobs, beam=beam, graph=graph)
    assert result.ids == reference_search(ids, logprobs, beam, graph)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 40),
    st.integers(1, 6),
    st.integers(1, 8),
    st.integers(0, 10),
    st.booleans(),
)
def test_frame_spans_are_ordered_and_inside_the_input(
    seed: int, frames: int, k: int, beam: int, offset: int, biased: bool
) -> None:
    ids, logprobs = random_topk(seed, frames, k, vocab=5)
    graph = ContextGraph([Phrase((1, 2), 2.0), Phrase((3, 3), 1.0)]) if biased else None
    result = prefix_beam_search(ids, logprobs, beam=beam, graph=graph, frame_offset=offset)
    assert len(result.ids) == len(result.first_frame) == len(result.last_frame)
    spans = list(zip(result.first_frame, result.last_frame, strict=True))
    for first, last in spans:
        assert offset <= first <= last <= offset + frames - 1
    for (_, last), (first, _) in itertools.pairwise(spans):
        assert last < first
    assert BLANK not in result.ids
