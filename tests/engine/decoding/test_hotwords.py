"""engine.decoding.hotwords: phrases to context graphs, as the model writes them, refused
when the vocabulary cannot spell them, compiled once."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.decoding.context_graph import ROOT
from engine.decoding.hotwords import HotwordCompiler, Speller, hotword_text
from engine.errors import HotwordError
from engine.model.directory import load_model_dir
from engine.model.tokenizer import Tokenizer
from engine.types import Hotword


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
