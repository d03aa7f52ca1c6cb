"""Hotwords as the decoder uses them: token sequences in a context graph, compiled once.

A phrase is split into the model's pieces as the model would write it: as given when the
request asks for inverse text normalisation (cased, punctuated output), lowercased when it
does not (SenseVoice then writes spoken-form lowercase). A phrase with characters the
vocabulary cannot spell is refused: the model could never emit it. So is a list whose
phrases hold more tokens than one context graph may (MAX_GRAPH_TOKENS), counted before the
graph is built.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from engine.decoding.context_graph import MAX_GRAPH_TOKENS, ContextGraph, Phrase
from engine.errors import HotwordError, HotwordLimitError
from engine.model.tokenizer import Tokenizer
from engine.types import Hotword

#: Compiled phrase sets kept per recognizer (sessions mostly share a few sets)...
CACHE_SIZE = 64
#: ...and the bytes their graphs may hold together: 64 lists at the token cap (about
#: 5 MiB each), so that lists in use are not compiled again on the device's thread.
CACHE_BYTES = 384 * 2**20


def hotword_text(phrase: str, itn: bool) -> str:
    """The phrase as the model writes it under this text normalisation."""
    text = " ".join(phrase.split())
    return text if itn else text.lower()


@dataclass(frozen=True, slots=True)
class _Refusal:
    """Why a list of hotwords is refused, and the error the engine raises for it."""

    error: type[HotwordError]
    message: str

    def exception(self) -> HotwordError:
        """A fresh exception to raise (a cached one would collect every raise's traceback)."""
        return self.error(self.message)


class Speller:
    """Which hotwords a tokenizer cannot spell, cased (ITN) or lowercased: the model could
    never emit them. A front end holds one too (`EngineReport.tokenizer`) to refuse them,
    and lists too large for one context graph, when a stream starts."""

    __slots__ = ("_refusals", "_tokenizer")

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        # A thousand long phrases take about 10 ms to split; streams mostly share a few sets.
        self._refusals = functools.lru_cache(maxsize=CACHE_SIZE)(self._refusal)

    def unwritable(self, hotwords: Sequence[Hotword]) -> tuple[str, ...]:
        """The phrases with characters outside the vocabulary, cased or lowercased."""
        return self._spell(hotwords)[0]

    def refusal(self, hotwords: Sequence[Hotword]) -> str | None:
        """Why these hotwords are refused, naming every unwritable one (None: all fit)."""
        refused = self._refusals(tuple(hotwords))
        return None if refused is None else refused.message

    def check(self, hotwords: Sequence[Hotword]) -> None:
        """Raise HotwordError naming every unwritable phrase, or HotwordLimitError when the
        list would make a context graph of more than MAX_GRAPH_TOKENS tokens."""
        refused = self._refusals(tuple(hotwords))
        if refused is not None:
            raise refused.exception()

    def _spell(self, hotwords: Sequence[Hotword]) -> tuple[tuple[str, ...], int]:
        """The unwritable phrases, and the most tokens the phrases take in one text norm."""
        unknown, encode = self._tokenizer.unknown_id, self._tokenizer.encode
        bad: list[str] = []
        cased = spoken = 0
        for h in hotwords:
            # Each text norm: a graph is compiled for either.
            forms = encode(hotword_text(h.phrase, True)), encode(hotword_text(h.phrase, False))
            if any(unknown in ids for ids in forms):
                bad.append(h.phrase)
            cased, spoken = cased + len(forms[0]), spoken + len(forms[1])
        return tuple(bad), max(cased, spoken)

    def _refusal(self, hotwords: tuple[Hotword, ...]) -> _Refusal | None:
        bad, tokens = self._spell(hotwords)
        if bad:
            named = ", ".join(repr(p) for p in bad)
            return _Refusal(
                HotwordError,
                f"the model cannot write these hotwords (characters outside its vocabulary): "
                f"{named}",
            )
        # A graph's states and edges are at most its tokens: counting them bounds it before
        # anything is built (repeats counted too, so the count is the caller's own).
        if tokens > MAX_GRAPH_TOKENS:
            return _Refusal(
                HotwordLimitError,
                f"{len(hotwords)} hotwords make a context graph of {tokens} tokens; at most "
                f"{MAX_GRAPH_TOKENS} (fewer or shorter phrases)",
            )
        return None


class HotwordCompiler:
    """Turns a request's hotwords into a `ContextGraph`; keeps the most recent sets, up to
    `cache_size` of them and `cache_bytes` of graphs (a larger graph is not kept).

    Thread-safe: requests are prepared on the feature threads and decoded on the device's.
    """

    def __init__(
        self, tokenizer: Tokenizer, cache_size: int = CACHE_SIZE, cache_bytes: int = CACHE_BYTES
    ) -> None:
        self._tokenizer = tokenizer
        self._speller = Speller(tokenizer)
        self._cache: OrderedDict[tuple[tuple[Hotword, ...], bool], ContextGraph] = OrderedDict()
        self._cache_size = cache_size
        self._cache_bytes = cache_bytes
        self._held = 0
        self._lock = threading.Lock()

    @property
    def cached_bytes(self) -> int:
        """Estimated bytes of the graphs kept now."""
        with self._lock:
            return self._held

    def check(self, hotwords: Sequence[Hotword]) -> None:
        """Raise HotwordError naming every phrase the model cannot emit, or
        HotwordLimitError for a list too large for one graph."""
        self._speller.check(hotwords)

    def graph(self, hotwords: tuple[Hotword, ...], itn: bool) -> ContextGraph:
        """The context graph of these hotwords as written under `itn`, compiled once."""
        key = (hotwords, itn)
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
                return found
        self.check(hotwords)
        phrases = [
            Phrase(tuple(self._tokenizer.encode(hotword_text(h.phrase, itn))), h.boost)
            for h in hotwords
        ]
        graph = ContextGraph(phrases)
        with self._lock:
            self._keep(key, graph)
        return graph

    def _keep(self, key: tuple[tuple[Hotword, ...], bool], graph: ContextGraph) -> None:
        """Cache `graph`, dropping the least recently used until both bounds hold."""
        if graph.nbytes > self._cache_bytes or key in self._cache:
            return
        self._cache[key] = graph
        self._held += graph.nbytes
        while len(self._cache) > self._cache_size or self._held > self._cache_bytes:
            _, dropped = self._cache.popitem(last=False)
            self._held -= dropped.nbytes
