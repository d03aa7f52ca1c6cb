"""The hotword benchmark on the demo model, tiny: every condition is measured and reported."""

from __future__ import annotations

import json
from pathlib import Path

from tools.bench.hotwords import UNSEEN, biased_sentences, contains, main, unseen_values, wer

CONDITIONS = ["greedy", "boost2-beam4", "boost4-beam4", "boost2-beam8", "boost4-beam8"]


def test_a_tiny_run_reports_every_condition_in_range(demo_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "hotwords.json"
    assert main(["--model", str(demo_model), "--phrases", "3", "--control", "2",
                 "--repeats", "1", "--speech-cache", str(tmp_path / "speech"),
                 "--json", str(out)]) == 0  # fmt: skip
    report = json.loads(out.read_text())
    assert report["machine"]["cpu"]
    assert report["config"]["hotwords"] == ["Martin", "Austin", "finance"]
    biased, control = report["biased_set"], report["control_set"]
    assert biased["candidates"] == 3
    assert biased["kept"] + biased["dropped_greedy_right"] == 3
    assert control["sentences"] == 2
    assert len(report["biased"]) == biased["kept"] and len(report["control"]) == 2
    rows = {row["name"]: row for row in report["conditions"]}
    assert list(rows) == CONDITIONS
    for row in rows.values():
        for key in ("recall", "wrong_phrase", "false_insertions"):
            assert row[key] is None or 0.0 <= row[key] <= 1.0
        assert 0.0 <= row["control_wer"] <= 2.0
        assert row["decode_ms"] > 0 and row["model_ms"] > 0 and row["search_ms"] >= 0
    # At the recognizer's beam the direct search writes what Recognizer.decode writes.
    assert rows["boost2-beam4"]["direct_agrees"] == 1.0
    assert rows["boost2-beam8"]["decoded_by"] == "direct search"
    assert set(rows["boost2-beam4"]["checks"]) == set(report["acceptance"]["checks"])
    assert all(v in (True, False, None) for v in report["acceptance"]["checks"].values())
    assert report["acceptance"]["condition"] == "boost2-beam4"
    assert all(set(r["outputs"]) == set(CONDITIONS) for r in report["control"])


def test_unseen_values_take_the_slots_in_turn_and_fill_a_template() -> None:
    assert unseen_values(4) == [("name", "Martin"), ("city", "Austin"), ("team", "finance"),
                                ("thing", "laptop")]  # fmt: skip
    assert len(unseen_values(None)) == sum(len(v) for v in UNSEEN.values())
    sentences = biased_sentences(4, ["en-us", "en-gb"], seed=1)
    assert [s.voice for s in sentences] == ["en-us", "en-gb", "en-us", "en-gb"]
    for s in sentences:
        assert s.phrase is not None and contains(s.written, s.phrase)
        assert s.phrase.lower() in s.spoken.split() and s.spoken == s.spoken.lower()


def test_phrases_match_whole_words_and_wer_counts_word_edits() -> None:
    assert contains("Thank you, this is LISA.", "Lisa")
    assert not contains("Tonight we fly to Lisbon.", "Lisa")
    assert wer(["Your balance is $4.50."], ["your balance is $4.50"]) == 0.0
    assert wer(["a b c d"], ["a x c"]) == 0.5
