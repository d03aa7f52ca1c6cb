"""A live session's final latency beside a continuous fast replay, against the same session
alone, side by side in one server run; the ratio says what the replay costs a live stream.

The work is done by tools/bench/fairness.py.

Example:
    python scripts/bench_fairness.py --json benchmarks/fairness-cpu.json
    python scripts/bench_fairness.py --server-args=--vad-thread \
        --json benchmarks/fairness-vad-thread.json
"""

from tools.bench.fairness import main

if __name__ == "__main__":
    raise SystemExit(main())
