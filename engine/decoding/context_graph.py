"""Contextual biasing (hotwords): an Aho-Corasick automaton over token-id phrases.

A hypothesis walks the automaton one emitted token at a time. Each state carries the bonus
of the partial match it stands for; a token that deepens the match earns the phrase's
per-token boost, and a token that breaks it falls back along the fail links and gives back
what the broken part earned, so only completed phrases keep a bonus in the end (the method
of icefall's ``ContextGraph``).

The graph holds one edge per trie edge and follows fail links as it steps, so it grows
with its phrases' tokens and no faster (a table of every state's transitions can copy one
state's branches into thousands of others); the tokens are capped.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from engine.errors import HotwordLimitError

#: The state every hypothesis starts in: no partial match.
ROOT = 0

#: Most tokens a graph's distinct phrases may hold, which bounds its states, edges and
#: bytes: a thousand phrases of 16 tokens (a name or term of a few words takes 2 to 8).
#: A graph this size holds about 5 MiB and takes 0.1 s to build.
MAX_GRAPH_TOKENS = 16_384

#: Bytes of an int object the graph holds (edge keys and targets, token ids: under 2**30).
_INT_BYTES = 28
#: Ints up to this one are shared objects that no graph adds to memory.
_SMALL_INT = 256
#: Bytes of a float object.
_FLOAT_BYTES = 24


@dataclass(frozen=True, slots=True)
class Phrase:
    """A hotword as token ids, and the bonus (log-score) earned per matched token."""

    tokens: tuple[int, ...]
    boost: float

    def __post_init__(self) -> None:
        # Callers hand lists too; the graph keys phrases by their token tuple.
        object.__setattr__(self, "tokens", tuple(self.tokens))
        if not self.tokens:
            raise ValueError("a phrase needs at least one token")
        if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in self.tokens):
            raise ValueError(f"phrase tokens must be non-negative ints; got {self.tokens}")
        if not (math.isfinite(self.boost) and self.boost > 0):
            raise ValueError(f"phrase boost must be finite and > 0; got {self.boost}")


@dataclass(frozen=True, slots=True)
class _Trie:
    """The phrase trie before the automaton is derived from it."""

    children: list[dict[int, int]]
    token_boost: list[float]
    phrase_at: list[int | None]


class ContextGraph:
    """Immutable Aho-Corasick automaton over token ids; safe to share across threads.

    ``phrases`` holds the distinct phrases (a repeated token sequence keeps its larger
    boost, at its first position); the phrase indices that ``step`` reports index it.
    Raises HotwordLimitError, before building anything, when they hold more than
    ``max_tokens`` tokens.
    """

    __slots__ = ("_acc", "_arrive", "_ceiling", "_edges", "_fail", "_nbytes", "_phrases", "_size")

    def __init__(self, phrases: Sequence[Phrase], max_tokens: int = MAX_GRAPH_TOKENS) -> None:
        self._phrases = _dedupe(phrases)
        tokens = sum(len(p.tokens) for p in self._phrases)
        if tokens > max_tokens:
            raise HotwordLimitError(
                f"{len(self._phrases)} phrases make a context graph of {tokens} tokens; "
                f"at most {max_tokens}"
            )
        trie = _build_trie(self._phrases)
        fail, order = _fail_links(trie.children)
        # Partial-match bonus of each node: the boosts along its path from the root.
        acc = [0.0] * len(fail)
        for node in order:
            for child in trie.children[node].values():
                acc[child] = acc[node] + trie.token_boost[child]
        self._acc: tuple[float, ...] = tuple(acc)
        self._fail = array("q", fail)
        # Every trie edge in one table, keyed token * states + state: no dict per state.
        self._size = len(fail)
        self._edges = {
            token * self._size + node: child
            for node, kids in enumerate(trie.children)
            for token, child in kids.items()
        }
        self._arrive = _arrivals(trie, self._phrases, fail, order, self._acc)
        self._ceiling = _ceilings(trie.children, fail, order, self._arrive, self._acc)
        self._nbytes = self._footprint()

    @property
    def phrases(self) -> tuple[Phrase, ...]:
        """The distinct phrases, in first-seen order."""
        return self._phrases

    @property
    def num_states(self) -> int:
        """Number of automaton states, root included (at most 1 + total phrase tokens)."""
        return len(self._acc)

    @property
    def nbytes(self) -> int:
        """Estimated bytes this graph holds (its tables, edges and phrases)."""
        return self._nbytes

    def step(self, state: int, token: int) -> tuple[float, int, int | None]:
        """Advance ``state`` by ``token``: (bonus to add, next state, completed phrase or None).

        The bonus is negative when the token breaks a partial match: the broken part's bonus
        is withdrawn. When phrases complete, the bonus includes every phrase ending here
        (the longest is reported), and they keep it whatever comes next.
        """
        edges = self._edges
        key = token * self._size
        node = edges.get(key + state)
        at = state
        # Follow fail links until a state continues with the token: each is shallower, so
        # the walk is at most as long as the match so far.
        while node is None and at != ROOT:
            at = self._fail[at]
            node = edges.get(key + at)
        gain, next_state, phrase = self._arrive[ROOT if node is None else node]
        return gain - self._acc[state], next_state, phrase

    def max_bonus(self, state: int) -> float:
        """An upper bound on the bonus ``step(state, token)`` returns for any token."""
        return self._ceiling[state]

    def finish(self, state: int) -> float:
        """Bonus to add at the end of decoding: withdraws an unfinished partial match."""
        return -self._acc[state]

    def _footprint(self) -> int:
        """Bytes of everything the graph alone keeps alive, objects in its tuples included."""
        size = self._size
        edges = sys.getsizeof(self._edges) + 2 * _INT_BYTES * len(self._edges)
        # Per state: its partial bonus (a float) and its arrival: a tuple of a float, a state
        # (the int an edge holds) and a phrase index (the phrases' few).
        states = (
            sys.getsizeof(self._acc)
            + sys.getsizeof(self._arrive)
            + size * (2 * _FLOAT_BYTES + sys.getsizeof(self._arrive[ROOT]))
        )
        phrases = sys.getsizeof(self._phrases) + sum(
            sys.getsizeof(p) + sys.getsizeof(p.tokens) + _FLOAT_BYTES for p in self._phrases
        )
        tokens = sum(t > _SMALL_INT for p in self._phrases for t in p.tokens)
        arrays = sys.getsizeof(self._fail) + sys.getsizeof(self._ceiling)
        return edges + states + phrases + _INT_BYTES * tokens + arrays


def _dedupe(phrases: Sequence[Phrase]) -> tuple[Phrase, ...]:
    """One phrase per token sequence, with the largest boost, in first-seen order."""
    best: dict[tuple[int, ...], float] = {}
    for phrase in phrases:
        best[phrase.tokens] = max(phrase.boost, best.get(phrase.tokens, 0.0))
    return tuple(Phrase(tokens, boost) for tokens, boost in best.items())


def _build_trie(phrases: Sequence[Phrase]) -> _Trie:
    """The phrase trie; a node shared by phrases gets the largest of their boosts."""
    children: list[dict[int, int]] = [{}]
    token_boost = [0.0]
    phrase_at: list[int | None] = [None]
    for index, phrase in enumerate(phrases):
        node = ROOT
        for token in phrase.tokens:
            child = children[node].get(token)
            if child is None:
                child = len(children)
                children[node][token] = child
                children.append({})
                token_boost.append(0.0)
                phrase_at.append(None)
            # The optimistic partial bonus: the strongest phrase this prefix could become.
            token_boost[child] = max(token_boost[child], phrase.boost)
            node = child
        phrase_at[node] = index
    return _Trie(children, token_boost, phrase_at)


def _fail_links(children: list[dict[int, int]]) -> tuple[list[int], list[int]]:
    """Fail link of every node (longest proper suffix that is a trie prefix) and BFS order."""
    fail = [ROOT] * len(children)
    order = [ROOT]
    queue: deque[int] = deque(children[ROOT].values())
    while queue:
        node = queue.popleft()
        order.append(node)
        for token, child in children[node].items():
            # Shallower nodes come first in BFS, so their fail links are already final.
            back = fail[node]
            while back != ROOT and token not in children[back]:
                back = fail[back]
            fail[child] = children[back].get(token, ROOT)
            queue.append(child)
    return fail, order


def _arrivals(
    trie: _Trie,
    phrases: Sequence[Phrase],
    fail: list[int],
    order: list[int],
    acc: Sequence[float],
) -> tuple[tuple[float, int, int | None], ...]:
    """Per node reached by a token: (score after arriving, state to rest in, phrase ended).

    The score after arriving is the partial bonus of the resting state plus the full bonus
    of every phrase ending at the node (itself, then along its fail chain), which is banked
    so that later withdrawals of the partial bonus leave it in place.
    """
    size = len(fail)
    banked = [0.0] * size
    rest = [ROOT] * size
    ended: list[int | None] = [None] * size
    for node in order[1:]:
        own = trie.phrase_at[node]
        back = fail[node]
        own_bonus = 0.0 if own is None else len(phrases[own].tokens) * phrases[own].boost
        banked[node] = own_bonus + banked[back]
        ended[node] = own if own is not None else ended[back]
        # A leaf has nothing left to match: rest in the longest suffix that still can grow,
        # so the hypothesis does not carry a completed phrase's partial bonus twice.
        rest[node] = node if trie.children[node] else rest[back]
    return tuple((acc[rest[n]] + banked[n], rest[n], ended[n]) for n in range(size))


def _ceilings(
    children: list[dict[int, int]],
    fail: list[int],
    order: list[int],
    arrive: Sequence[tuple[float, int, int | None]],
    acc: Sequence[float],
) -> array[float]:
    """Per state, a bound on any step's bonus, so a search can skip hopeless extensions."""
    # A token from a state lands on a child of a state on its fail chain, the root's
    # included, or on the root (gain 0). Counting a child that a deeper one shadows only
    # loosens the bound.
    best = [0.0] * len(fail)
    for state in order:
        below = 0.0 if state == ROOT else best[fail[state]]
        best[state] = max([below, *(arrive[child][0] for child in children[state].values())])
    return array("d", (best[state] - acc[state] for state in range(len(fail))))
