"""engine.decoding.hotwords: phrases to context graphs, as the model writes them, refused
when the vocabulary cannot spell them or the list is too large, compiled once and cached
within a byte bound."""

from __future__ import annotations

import itertools
import random
import re
import string
from pathlib import Path

import pytest

from engine.decoding import hotwords as hotwords_module
from engine.decoding.context_graph import MAX_GRAPH_TOKENS, ROOT
from engine.decoding.hotwords import HotwordCompiler, Speller, hotword_text
from engine.errors import HotwordError, HotwordLimitError
from engine.model.directory import load_model_dir
from engine.model.random_weights import assets
from engine.model.tokenizer import Tokenizer
from engine.types import MAX_HOTWORD_CHARS, MAX_HOTWORDS, Hotword


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> Tokenizer:
    return Tokenizer.from_file(load_model_dir(tiny_model_dir).tokenizer_path)


def matched(tokenizer: Tokenizer, hotwords: tuple[Hotword, ...], itn: bool, text: str) -> float:
    """The bonus the graph gives the tokens of `text` (a whole match keeps its bonus)."""
    graph = HotwordCompiler(tokenizer).graph(hotwords, itn)
    state, total = ROOT, 0.0
    for token in tokenizer.encode(text):
        bonus, state, _ = graph.step(state, token)
        total += bonus
    return total + graph.finish(state)


def test_phrases_are_written_as_the_model_writes_them() -> None:
    assert hotword_text("  Speech   Server ", itn=True) == "Speech Server"
    assert hotword_text("Speech Server", itn=False) == "speech server"


def test_a_phrase_earns_its_bonus_in_the_form_of_its_text_norm(tokenizer: Tokenizer) -> None:
    hotwords = (Hotword("Speech Server", 1.5),)
    cased = len(tokenizer.encode("Speech Server")) * 1.5
    spoken = len(tokenizer.encode("speech server")) * 1.5
    assert matched(tokenizer, hotwords, True, "Speech Server") == pytest.approx(cased)
    assert matched(tokenizer, hotwords, False, "speech server") == pytest.approx(spoken)
    assert matched(tokenizer, hotwords, False, "speech serf") == pytest.approx(0.0)


def test_a_phrase_the_vocabulary_cannot_spell_is_refused_by_name(tokenizer: Tokenizer) -> None:
    compiler = HotwordCompiler(tokenizer)
    with pytest.raises(HotwordError, match="'\u2603 snowman'") as info:
        compiler.graph((Hotword("hello"), Hotword("\u2603 snowman")), True)
    assert info.value.code == "unsupported_hotword" and "hello'" not in str(info.value)
    compiler.check((Hotword("hello world"),))


def test_a_front_end_refuses_what_the_engine_refuses_from_the_reported_tokenizer(
    tokenizer: Tokenizer,
) -> None:
    # A front end holds only the serialized model the engine reported (EngineReport).
    speller = Speller(Tokenizer.from_serialized(tokenizer.serialized()))
    hotwords = [Hotword("hello"), Hotword("\u2603 snowman"), Hotword("Zo\u00eb")]
    engine_says = HotwordCompiler(tokenizer)
    with pytest.raises(HotwordError) as info:
        engine_says.check(hotwords)
    assert speller.unwritable(hotwords) == ("\u2603 snowman", "Zo\u00eb")
    assert speller.refusal(hotwords) == str(info.value)
    assert speller.refusal([Hotword("hello world")]) is None


def test_a_phrase_set_is_compiled_once_and_the_oldest_set_goes_first(
    tokenizer: Tokenizer,
) -> None:
    compiler = HotwordCompiler(tokenizer, cache_size=2)
    a, b, c = (Hotword("hello"),), (Hotword("world"),), (Hotword("speech"),)
    first = compiler.graph(a, True)
    assert compiler.graph(a, True) is first
    assert compiler.graph(a, False) is not first  # another text norm, another graph
    compiler.graph(b, True)  # a (itn) was used last but one: now the oldest
    compiler.graph(c, True)
    assert compiler.graph(a, True) is not first


def hub_branches(tokenizer: Tokenizer) -> list[str]:
    """Short phrases 'a…' whose token after the hub piece ('▁a') differs from phrase to phrase."""
    hub = tokenizer.encode("a")
    alphabet = string.ascii_lowercase + string.digits
    seen: set[int] = set()
    found: list[str] = []
    for tail in itertools.chain(alphabet, map("".join, itertools.product(alphabet, repeat=2))):
        for text in (f"a {tail}", f"a{tail}"):
            ids = tokenizer.encode(text)
            if ids[: len(hub)] != hub or len(ids) == len(hub) or tokenizer.unknown_id in ids:
                continue
            if ids[len(hub)] not in seen:
                seen.add(ids[len(hub)])
                found.append(text)
    return found


def pathological(tokenizer: Tokenizer) -> tuple[Hotword, ...]:
    """A thousand phrases of at most 64 characters shaped for the largest graph.

    Short phrases branch off the hub '▁a'; the rest are runs of 31 '▁a' after distinct
    two-character words, so every state of every run falls back to the hub. A graph that
    tabulates each state's transitions copies every branch into each of them: 4.5 million
    entries, about 230 MiB, with the test tokenizer.
    """
    branches = hub_branches(tokenizer)
    firsts = string.ascii_lowercase[1:] + string.digits
    starts = ["".join(p) for p in itertools.product(firsts, repeat=2)]
    runs = [start + " a" * 31 for start in starts[: MAX_HOTWORDS - len(branches)]]
    return tuple(Hotword(p) for p in branches + runs)


def tokens_of(tokenizer: Tokenizer, hotwords: tuple[Hotword, ...], itn: bool) -> int:
    return sum(len(tokenizer.encode(hotword_text(h.phrase, itn))) for h in hotwords)


def test_the_pathological_list_is_refused_by_its_size_before_a_graph_is_built(
    tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    hotwords = pathological(tokenizer)
    assert len(hotwords) == MAX_HOTWORDS
    assert all(len(h.phrase) <= MAX_HOTWORD_CHARS for h in hotwords)
    assert len(hub_branches(tokenizer)) > 100
    speller = Speller(Tokenizer.from_serialized(tokenizer.serialized()))
    assert speller.unwritable(hotwords) == ()
    size = max(tokens_of(tokenizer, hotwords, itn) for itn in (True, False))
    assert size > MAX_GRAPH_TOKENS
    why = f"{MAX_HOTWORDS} hotwords make a context graph of {size} tokens; at most "
    # The front end refuses it from the reported tokenizer, before any audio...
    refusal = speller.refusal(hotwords)
    assert refusal is not None and f"{why}{MAX_GRAPH_TOKENS}" in refusal
    # ...and the engine's compile refuses it the same way, without building a graph.
    built: list[object] = []
    monkeypatch.setattr(hotwords_module, "ContextGraph", built.append)
    compiler = HotwordCompiler(tokenizer)
    for itn in (True, False):
        with pytest.raises(HotwordLimitError) as info:
            compiler.graph(hotwords, itn)
        assert info.value.code == "unsupported_hotword"
        assert str(info.value) == refusal
    assert built == []


def test_a_thousand_short_phrases_still_compile(tokenizer: Tokenizer) -> None:
    text = (assets() / "tokenizer_corpus.txt").read_text(encoding="utf-8").lower()
    words = sorted({w for w in re.findall(r"[a-z]+", text) if len(w) > 2})
    pairs = random.Random(7).sample(list(itertools.permutations(words, 2)), MAX_HOTWORDS)
    hotwords = tuple(Hotword(f"{a} {b}") for a, b in pairs)
    speller = Speller(Tokenizer.from_serialized(tokenizer.serialized()))
    assert speller.refusal(hotwords) is None
    graph = HotwordCompiler(tokenizer).graph(hotwords, itn=False)
    assert len(graph.phrases) == MAX_HOTWORDS
    assert graph.num_states <= 1 + tokens_of(tokenizer, hotwords, itn=False) <= MAX_GRAPH_TOKENS
    phrase = hotwords[0].phrase
    expected = 2.0 * len(tokenizer.encode(phrase))
    assert matched(tokenizer, hotwords, False, phrase) == pytest.approx(expected)


def test_the_cache_is_bounded_in_bytes_and_drops_the_least_recent_graphs(
    tokenizer: Tokenizer,
) -> None:
    a, b, c = (Hotword("hello"),), (Hotword("world"),), (Hotword("speech"),)
    large = tuple(Hotword(f"{w} test") for w in ("hello", "world", "speech", "server"))
    sizes = [HotwordCompiler(tokenizer).graph(x, True).nbytes for x in (a, b, c, large)]
    assert 0 < max(sizes[:3]) < sizes[3]
    # Room for a, b and c; for a and the large one; never for a, the large one and b or c.
    budget = sizes[0] + sizes[3] + min(sizes[1], sizes[2]) - 1
    compiler = HotwordCompiler(tokenizer, cache_bytes=budget)
    first_a, first_b, first_c = (compiler.graph(x, True) for x in (a, b, c))
    assert compiler.graph(a, True) is first_a  # all three fit: a is now the most recent
    assert compiler.cached_bytes == sum(sizes[:3])
    compiler.graph(large, True)  # b, then c, the least recent, make room for it
    assert compiler.cached_bytes == sizes[0] + sizes[3] <= budget
    assert compiler.graph(a, True) is first_a
    assert compiler.graph(c, True) is not first_c
    assert compiler.graph(b, True) is not first_b
    assert compiler.cached_bytes <= budget
    # A graph larger than the whole budget is compiled for its request but not kept.
    small = HotwordCompiler(tokenizer, cache_bytes=sizes[3] - 1)
    kept = small.graph(a, True)
    assert small.graph(large, True) is not small.graph(large, True)
    assert small.graph(a, True) is kept
    assert small.cached_bytes == sizes[0]
