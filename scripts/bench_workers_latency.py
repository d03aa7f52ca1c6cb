"""A lone final's latency through one server process against `--workers 2` (issue 36).

Example (the full-size random-weight test model, as the engine-process benchmark uses):
    python scripts/bench_workers_latency.py --model ~/.cache/sensestream/models/test-full \
        --json benchmarks/workers-latency.json
"""

from tools.bench.workers_latency import main

if __name__ == "__main__":
    raise SystemExit(main())
