"""Engine replicas on Ray Serve (1 and 2) against the in-process engine, side by side.

The work is done by tools/bench/ray/; it needs `pip install '.[ray]'` and runs a
loopback-only local Ray cluster.

Example:
    python scripts/bench_ray.py --model ~/.cache/sensestream/models/test-full \
        --json benchmarks/ray-replicas.json
"""

from tools.bench.ray.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
