"""The demo model's sentences: two forms that say the same thing, and a clean held-out split."""

from __future__ import annotations

import itertools
import random
import re

from tools.demo_model import texts
from tools.demo_model.texts import Sentence, held_out, sentence, spoken_words, training


def test_the_spoken_form_is_lowercase_words_only() -> None:
    rng = random.Random(5)
    for _ in range(500):
        s = sentence(rng)
        assert re.fullmatch(r"[a-z' ]+", s.spoken), s
        assert s.spoken == " ".join(s.spoken.split())


def test_written_forms_carry_digits_where_the_spoken_form_has_words() -> None:
    rng = random.Random(0)
    money = texts.SLOTS["money"](rng)
    assert re.fullmatch(r"\$\d+(\.\d\d)?", money[0])
    assert "dollars" in money[1] and not re.search(r"\d", money[1])
    assert texts.SLOTS["percent"](random.Random(1))[1].endswith(" percent")
    written, spoken = texts._time(random.Random(3))
    assert re.fullmatch(r"\d{1,2}(:\d\d)? (AM|PM)", written)
    assert spoken.endswith(("a m", "p m"))


def test_a_time_with_minutes_under_ten_is_said_with_oh() -> None:
    for seed in range(200):
        written, spoken = texts._time(random.Random(seed))
        if re.search(r":0[1-9]", written):
            assert " oh " in spoken
            return
    raise AssertionError("no time with single-digit minutes in 200 draws")


def test_ordinal_dates() -> None:
    assert [texts._ordinal_suffix(d) for d in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23)] == [
        "st", "nd", "rd", "th", "th", "th", "th", "st", "nd", "rd",
    ]  # fmt: skip


def test_training_never_yields_a_held_out_sentence_and_held_out_only_those() -> None:
    seen = {s.spoken for s in itertools.islice(training(3), 3000)}
    kept = held_out(3, 40)
    assert all(s.held_out for s in kept)
    assert len({s.spoken for s in kept}) == 40
    assert not seen & {s.spoken for s in kept}
    assert not any(Sentence("x", s).held_out for s in seen)


def test_spoken_words_drops_punctuation_but_keeps_apostrophes() -> None:
    assert spoken_words("Let's go, Anna!  It's 3 PM.") == "let's go anna it's pm"
