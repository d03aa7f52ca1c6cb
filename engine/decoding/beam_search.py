"""CTC prefix beam search over per-frame top-K candidates, with optional hotword biasing.

Prefixes are interned as ids in a trie that lives for one call (``(parent id, token)`` ->
id), so extending and merging hypotheses costs a dict lookup on a small tuple rather than
hashing whole token sequences. Each hypothesis keeps log p(prefix, ending in blank) and
log p(prefix, ending in a token), each summed over alignments, plus the frame spans of the
alignment that contributed most to each (a persistent linked list, so updates are O(1)).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engine.decoding.context_graph import ROOT, ContextGraph
from engine.decoding.ctc import EMPTY_CTC_TOKENS, CtcTokens

_NEG_INF = -math.inf

#: Frame span of a prefix's last token, then the spans before it: (first, last, earlier).
_Spans = tuple[int, int, "_Spans"] | None

#: A hypothesis at one frame: log p(ending in blank), log p(ending in its last token), the
#: spans of the alignment contributing most to each, then its context state and score.
_Hyp = tuple[float, float, _Spans, _Spans, int, float]

#: A prefix named by its parent's id and its last token, before it has an id of its own.
_Key = tuple[int, int]


@dataclass(frozen=True, slots=True)
class _Prefixes:
    """The prefix trie of one search: parent and last token of every prefix id."""

    parent: list[int]
    last: list[int]
    ids: dict[_Key, int]


def prefix_beam_search(
    topk_ids: npt.NDArray[np.integer],
    topk_logprobs: npt.NDArray[np.floating],
    *,
    beam: int,
    graph: ContextGraph | None,
    blank_id: int = 0,
    frame_offset: int = 0,
) -> CtcTokens:
    """Best token sequence under CTC (plus the graph's bonuses), with each token's frame span.

    ``topk_ids``/``topk_logprobs`` are [T, K]: each frame's K candidate ids and their log
    probabilities (distinct ids per frame); ids outside a frame's K are treated as
    impossible. Frames in the result are shifted by ``frame_offset``.
    """
    if beam < 1:
        raise ValueError(f"beam must be >= 1; got {beam}")
    if topk_ids.ndim != 2 or topk_ids.shape != topk_logprobs.shape:
        raise ValueError(
            f"topk_ids and topk_logprobs must be [T, K] of one shape; "
            f"got {topk_ids.shape} and {topk_logprobs.shape}"
        )
    # The empty prefix is id 0, named by a key no real extension can have.
    prefixes = _Prefixes(parent=[-1], last=[-1], ids={(-1, -1): 0})
    hyps: dict[int, _Hyp] = {0: (0.0, _NEG_INF, None, None, ROOT, 0.0)}
    frames = zip(topk_ids.tolist(), topk_logprobs.tolist(), strict=True)
    for frame, (ids, logprobs) in enumerate(frames, start=frame_offset):
        grown = _advance(hyps, ids, logprobs, frame, prefixes, graph, blank_id, beam)
        hyps = _prune(grown, beam, prefixes)
    return _best(hyps, prefixes, graph)


def _advance(  # noqa: PLR0917 - the hot loop's state, passed once per frame
    hyps: dict[int, _Hyp],
    ids: list[int],
    logprobs: list[float],
    frame: int,
    prefixes: _Prefixes,
    graph: ContextGraph | None,
    blank_id: int,
    beam: int,
) -> dict[_Key, _Hyp]:
    """Every hypothesis after one more frame that could still make the beam."""
    frame_logprob = dict(zip(ids, logprobs, strict=True))
    if len(frame_logprob) != len(ids):
        raise ValueError(f"frame {frame} lists a token twice among its candidates: {ids}")
    grown, floor = _continue(hyps, frame_logprob, frame, prefixes, blank_id)
    # `floor` holds lower bounds on the final scores of distinct prefixes; once it holds
    # `beam` of them, a new prefix scoring below its minimum is certain to be pruned.
    full = len(floor) >= beam
    cutoff = floor[0] if full else _NEG_INF
    # Likelier candidates first, so the cutoff rises early and prunes the rest.
    candidates = sorted(
        ((lp, t) for t, lp in zip(ids, logprobs, strict=True) if t != blank_id), reverse=True
    )
    last = prefixes.last
    for pid, (p_b, p_nb, spans_b, spans_nb, state, context) in hyps.items():
        p_all = _logaddexp(p_b, p_nb)
        spans_all = spans_b if p_b >= p_nb else spans_nb
        last_token = last[pid]
        # The most an extension's context can reach, to skip it before stepping the graph.
        ceiling = context if graph is None else context + graph.max_bonus(state)
        for logprob, token in candidates:
            if token != last_token:
                extend, spans = p_all + logprob, spans_all
            else:
                # A repeat is a new token only after a blank.
                extend, spans = p_b + logprob, spans_b
            key = (pid, token)
            held = grown.get(key)
            if held is not None:
                grown[key] = _merge(held, extend, (frame, frame, spans))
                continue
            if extend + ceiling < cutoff or extend == _NEG_INF:
                continue
            next_state, score = state, context
            if graph is not None:
                # The context depends only on the tokens, so merged paths agree on it.
                bonus, next_state, _ = graph.step(state, token)
                score += bonus
            if extend + score < cutoff:
                continue
            grown[key] = (_NEG_INF, extend, None, (frame, frame, spans), next_state, score)
            if full:
                heapq.heapreplace(floor, extend + score)
                cutoff = floor[0]
            else:
                heapq.heappush(floor, extend + score)
                full = len(floor) >= beam
                cutoff = floor[0] if full else _NEG_INF
    return grown


def _continue(
    hyps: dict[int, _Hyp],
    frame_logprob: dict[int, float],
    frame: int,
    prefixes: _Prefixes,
    blank_id: int,
) -> tuple[dict[_Key, _Hyp], list[float]]:
    """Each prefix carried on unchanged (by a blank or by its last token's run going on).

    Also returns their scores as a min-heap: later merges only raise them.
    """
    grown: dict[_Key, _Hyp] = {}
    floor: list[float] = []
    blank = frame_logprob.get(blank_id, _NEG_INF)
    parent, last = prefixes.parent, prefixes.last
    for pid, (p_b, p_nb, spans_b, spans_nb, state, context) in hyps.items():
        p_all = _logaddexp(p_b, p_nb)
        stay = p_nb + frame_logprob.get(last[pid], _NEG_INF)
        if blank == _NEG_INF and stay == _NEG_INF:
            continue
        stay_spans = None if spans_nb is None else (spans_nb[0], frame, spans_nb[2])
        spans_all = spans_b if p_b >= p_nb else spans_nb
        grown[parent[pid], last[pid]] = (p_all + blank, stay, spans_all, stay_spans, state, context)
        floor.append(_logaddexp(p_all + blank, stay) + context)
    heapq.heapify(floor)
    return grown, floor


def _merge(held: _Hyp, extend: float, spans: _Spans) -> _Hyp:
    """A prefix already reached this frame, plus a path that newly emits its last token."""
    p_b, p_nb, spans_b, spans_nb, state, context = held
    # Spans follow the larger contribution, so they always describe one real alignment.
    return (
        p_b,
        _logaddexp(p_nb, extend),
        spans_b,
        spans_nb if p_nb >= extend else spans,
        state,
        context,
    )


def _prune(grown: dict[_Key, _Hyp], beam: int, prefixes: _Prefixes) -> dict[int, _Hyp]:
    """The ``beam`` best hypotheses by acoustic plus context score, under prefix ids."""
    ranked = sorted(
        ((_logaddexp(hyp[0], hyp[1]) + hyp[5], key) for key, hyp in grown.items()),
        reverse=True,
    )
    kept: dict[int, _Hyp] = {}
    for _, key in ranked[:beam]:
        pid = prefixes.ids.get(key)
        if pid is None:
            # Only survivors get ids, so the trie grows by at most `beam` per frame.
            pid = prefixes.ids[key] = len(prefixes.parent)
            prefixes.parent.append(key[0])
            prefixes.last.append(key[1])
        kept[pid] = grown[key]
    return kept


def _best(hyps: dict[int, _Hyp], prefixes: _Prefixes, graph: ContextGraph | None) -> CtcTokens:
    """The winning prefix once unfinished hotword matches are withdrawn, with its spans."""
    best_pid, best_score = 0, _NEG_INF
    for pid, (p_b, p_nb, _, _, state, context) in hyps.items():
        score = _logaddexp(p_b, p_nb) + context
        if graph is not None:
            score += graph.finish(state)
        if score > best_score:
            best_pid, best_score = pid, score
    if best_pid not in hyps:
        return EMPTY_CTC_TOKENS
    p_b, p_nb, spans_b, spans_nb, _, _ = hyps[best_pid]
    spans = spans_b if p_b >= p_nb else spans_nb
    ids: list[int] = []
    pid = best_pid
    while pid != 0:
        ids.append(prefixes.last[pid])
        pid = prefixes.parent[pid]
    firsts: list[int] = []
    lasts: list[int] = []
    # The spans list has one entry per token of the prefix, last token first.
    while spans is not None:
        firsts.append(spans[0])
        lasts.append(spans[1])
        spans = spans[2]
    return CtcTokens(tuple(reversed(ids)), tuple(reversed(firsts)), tuple(reversed(lasts)))


def _logaddexp(a: float, b: float) -> float:
    """log(exp(a) + exp(b)) for plain floats, exact when either is -inf."""
    if a < b:
        a, b = b, a
    if b == _NEG_INF:
        return a
    return a + math.log1p(math.exp(b - a))
