"""tools.bench.partials (scripts/bench_partials.py): partial work per cadence, without a model."""

from __future__ import annotations

import json
from pathlib import Path

from tools.bench import partials as bench_partials


def test_the_default_partials_decode_a_bounded_window(tmp_path: Path) -> None:
    out = tmp_path / "partials.json"
    assert bench_partials.main(["--json", str(out), "--seconds", "5,30"]) == 0
    policies = json.loads(out.read_text())["policies"]
    whole = {r["utterance_s"]: r for r in policies["adaptive"]["rows"]}
    bounded = {r["utterance_s"]: r for r in policies["adaptive_hold_2s (default)"]["rows"]}
    # Same cadence, so the same partials; only the audio each one re-decodes differs.
    assert bounded[30.0]["partials"] == whole[30.0]["partials"]
    assert whole[30.0]["longest_partial_s"] > 29
    assert bounded[30.0]["longest_partial_s"] <= 2.0 + 2.0 + 0.5 + 0.3
    assert (
        bounded[30.0]["decoded_audio_per_speech_s"] < whole[30.0]["decoded_audio_per_speech_s"] / 3
    )
    assert bounded[30.0]["max_interval_s"] <= 2.0
