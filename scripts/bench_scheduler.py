"""Scheduler under offered load: throughput and final latency for several max_batch values.

The work is done by tools/bench/scheduler.py.

Example:
    python scripts/bench_scheduler.py --model models/test-full --precision int8 \
        --max-batch 1,4,8,16 --load 4,8,12,16,24 --duration 20 --json benchmarks/scheduler.json
"""

from tools.bench.scheduler import main

if __name__ == "__main__":
    raise SystemExit(main())
