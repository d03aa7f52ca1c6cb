"""Hotwords as the decoder uses them: token sequences in a context graph, compiled once.

A phrase is split into the model's pieces as the model would write it: as given when the
request asks for inverse text normalisation (cased, punctuated output), lowercased when it
does not (SenseVoice then writes spoken-form lowercase). A phrase with characters the
vocabulary cannot spell is refused: the model could never emit it.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Sequence

from engine.decoding.context_graph import ContextGraph, Phrase
from engine.errors import HotwordError
from engine.model.tokenizer import Tokenizer
from engine.types import Hotword

#: Compiled phrase sets kept per recognizer (sessions mostly share a few sets).
CACHE_SIZE = 64


def hotword_text(phrase: str, itn: bool) -> str:
    """The phrase as the model writes it under this text normalisation."""
    text = " ".join(phrase.split())
    return text if itn else text.lower()


class Speller:
    """Which hotwords a tokenizer cannot spell, cased (ITN) or lowercased: the model could
    never emit them. A front end holds one too (`EngineReport.tokenizer`) to refuse them
    when a stream starts."""

    __slots__ = ("_refusals", "_tokenizer")

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        # A thousand long phrases take about 10 ms to split; streams mostly share a few sets.
        self._refusals = functools.lru_cache(maxsize=CACHE_SIZE)(self._refusal)

    def unwritable(self, hotwords: Sequence[Hotword]) -> tuple[str, ...]:
        unknown = self._tokenizer.unknown_id
        encode = self._tokenizer.encode
        return tuple(
            h.phrase
            for h in hotwords
            if any(unknown in encode(hotword_text(h.phrase, itn)) for itn in (True, False))
        )

    def refusal(self, hotwords: Sequence[Hotword]) -> str | None:
        """Why these hotwords are refused, naming every unwritable one (None: all fit)."""
        return self._refusals(tuple(hotwords))

    def _refusal(self, hotwords: tuple[Hotword, ...]) -> str | None:
        bad = self.unwritable(hotwords)
        if not bad:
            return None
        named = ", ".join(repr(p) for p in bad)
        return f"the model cannot write these hotwords (characters outside its vocabulary): {named}"


class HotwordCompiler:
    """Turns a request's hotwords into a `ContextGraph`; the last `CACHE_SIZE` sets are kept.

    Thread-safe: requests are prepared on the feature threads and decoded on the device's.
    """

    def __init__(self, tokenizer: Tokenizer, cache_size: int = CACHE_SIZE) -> None:
        self._tokenizer = tokenizer
        self._speller = Speller(tokenizer)
        self._cache: OrderedDict[tuple[tuple[Hotword, ...], bool], ContextGraph] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def check(self, hotwords: Sequence[Hotword]) -> None:
        """Raise HotwordError naming every phrase the model cannot emit."""
        why = self._speller.refusal(hotwords)
        if why is not None:
            raise HotwordError(why)

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
            self._cache[key] = graph
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return graph
