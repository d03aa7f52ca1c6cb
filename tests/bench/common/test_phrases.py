"""Cutting sentences into phrases: the sizes asked for, every word once, in order."""

from __future__ import annotations

import random

import pytest

from tools.bench.common.phrases import phrase_sizes, phrase_texts


@pytest.mark.parametrize("words", range(1, 30))
def test_a_sentence_is_cut_into_phrases_of_the_asked_sizes(words: int) -> None:
    sizes = phrase_sizes(words, (3, 6), random.Random(words))
    assert sum(sizes) == words
    if words > 6:  # a sentence longer than a phrase: every phrase within LOW..HIGH
        assert all(3 <= n <= 6 for n in sizes) and len(sizes) >= 2
    else:
        assert sizes == [words]
    assert phrase_sizes(words, (0, 0), random.Random(0)) == [words]


def test_phrase_texts_keep_every_word_in_order() -> None:
    text = "I would like to change the delivery address for my order, because I will be away"
    phrases = phrase_texts(text, (3, 6), random.Random(4))
    assert " ".join(phrases) == text
    assert len(phrases) >= 3 and all(3 <= len(p.split()) <= 6 for p in phrases)


def test_text_without_spaces_is_cut_at_its_commas() -> None:
    text = "欢迎使用实时语音识别服务，这是一个测试句子，用来检查系统是否正常工作。"
    phrases = phrase_texts(text, (3, 6), random.Random(0))
    said = ["欢迎使用实时语音识别服务，", "这是一个测试句子，", "用来检查系统是否正常工作。"]
    assert phrases == said
    assert phrase_texts("今天天气很好。", (3, 6), random.Random(0)) == ["今天天气很好。"]
