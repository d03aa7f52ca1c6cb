"""Partial-decode work of the fixed and adaptive cadences for 5, 15 and 30 s utterances.

The work is done by tools/bench/partials.py.

Example:
    python scripts/bench_partials.py --json benchmarks/partials.json \
        --model models/test-full --backend onnx --precision int8
"""

from tools.bench.partials import main

if __name__ == "__main__":
    raise SystemExit(main())
