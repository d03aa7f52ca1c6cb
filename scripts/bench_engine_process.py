"""The engine in its own process (a Unix socket) against the engine in the server's
process: a lone 4 s final's latency and a burst's throughput, side by side in one run.

The work is done by tools/bench/engine_process.py.

Example:
    python scripts/make_test_model.py --size full --out ~/.cache/sensestream/models/test-full
    python scripts/bench_engine_process.py --model ~/.cache/sensestream/models/test-full \
        --json benchmarks/engine-process.json
"""

from tools.bench.engine_process import main

if __name__ == "__main__":
    raise SystemExit(main())
