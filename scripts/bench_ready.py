"""Seconds from start to ready (/readyz 200), for this checkout and optionally another,
and optionally sherpa-onnx's server on the same weights (--sherpa).

The work is done by tools/bench/ready.py.

Example:
    python scripts/bench_ready.py --model models/test-full --server-args "--precision int8" \
        --baseline-checkout /tmp/main-before --sherpa --json benchmarks/ready.json
"""

from tools.bench.ready import main

if __name__ == "__main__":
    raise SystemExit(main())
