"""Token confidence on the demo model: AUROC and ECE of word confidences (several ways of
making one from the engine's token confidences) on evaluate.py's held_out, unseen_voice and
music sets, per set and pooled, with a reliability table and a Platt fit; with --cost, the
decode time with confidence on against off (ONNX int8 and torch fp32, batch 1 and 8, the
demo and the full-size test model).

The work is done by tools/bench/confidence/.

Examples:
    python scripts/bench_confidence.py --json benchmarks/confidence-demo.json
    python scripts/bench_confidence.py --cost --json benchmarks/confidence-cost.json
"""

from tools.bench.confidence.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
