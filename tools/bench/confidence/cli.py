"""Token confidence on the demo model: how well a word's confidence, made from the engine's
token confidences, tells right words from wrong ones, and how well it is calibrated; with
--cost, what asking for confidence adds to a decode's time.

Calibration and discrimination (the default): every utterance of tools/demo_model/
evaluate.py's sets, made by its `eval_sets` (held_out: held-out sentences in training
voices; unseen_voice: voices never trained on; music: training voices over music), is
decoded alone through `Recognizer.decode` with `DecodeOptions(confidence=True)` (language
auto, ITN on: evaluate.py's "WER with ITN") on ONNX int8. Tokens are joined into words (a
token whose text starts with a space starts one), each normalised by evaluate.py's
`normalize`, and aligned to the reference's normalised words by jiwer's Levenshtein
alignment: a hypothesis word is right when matched, wrong when substituted or inserted
(a deleted reference word has no hypothesis word to score). Each word is scored by every
method of METHODS. For each: the AUROC of telling right (positive) from wrong words (with a
bootstrap interval over utterances, pooled) and the ECE over 10 equal-width bins, per set
and pooled; the best method's reliability table; and a Platt fit, p = sigmoid(a * logit(s)
+ b), fitted on one set's words and evaluated only on the other sets. An utterance's score
(its words' mean) is rated the same way for telling error-free utterances from the rest.

`min_frame` is not the engine's: the same scored graph is run again on the utterance
(`run_scored`), `greedy_collapse` gives each token's run of frames, and the token takes its
lowest frame posterior instead of the engine's mean of log-posteriors. That run also checks
the engine's: the same text tokens, and the same log-probabilities from `token_logprobs`.

The cost (--cost): the wall time of `Recognizer.decode` on one batch of 3-6 s utterances
of the same sets (held_out and unseen_voice), `DecodeOptions()` (the plain argmax graph)
against `DecodeOptions(confidence=True)` (the scored graph, once ready), taking turns, the
median of --repeats each, at batch 1 and 8, ONNX int8 and torch fp32, on the demo model and
the full-size random-weights test model (scripts/make_test_model.py --size full). The
process's CPU seconds per decode, the fastest of each and the 1-minute load average are
kept too: on a shared host other work slows both sides, and taking turns only evens it out.

The command line is scripts/bench_confidence.py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools.bench.common.cli import add_json, parser_for
from tools.bench.common.output import write_json
from tools.bench.confidence.accuracy import run_calibration
from tools.bench.confidence.cost import run_cost
from tools.bench.confidence.metrics import DEFAULT_FULL_MODEL


def parse_args(argv: Sequence[str] | None) -> Any:
    parser = parser_for(__doc__)
    parser.add_argument("--model", type=Path, default=Path("models/demo"))
    parser.add_argument("--precision", default="int8", help="ONNX precision of the default run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=11, help="evaluate.py's eval_sets seed")
    parser.add_argument("--count", type=int, default=60, help="eval_sets' utterances per set")
    parser.add_argument("--bootstrap", type=int, default=1000, help="resamples for intervals")
    parser.add_argument("--cost", action="store_true", help="measure the cost instead")
    parser.add_argument("--cost-models", default=f"models/demo,{DEFAULT_FULL_MODEL}")
    parser.add_argument("--batches", type=lambda s: [int(b) for b in s.split(",")], default=[1, 8])
    parser.add_argument("--repeats", type=int, default=7, help="decodes of each, taking turns")
    add_json(parser, required=True)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    document = run_cost(args) if args.cost else run_calibration(args)
    document["run_s"] = round(time.perf_counter() - started, 1)
    write_json(args.json, document, indent=1)
    return 0
