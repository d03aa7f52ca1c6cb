"""int8 recipes (unsigned / signed weights, per-tensor / per-channel, reduce_range, and
weight-only blockwise 8 and 4 bits) on this
CPU: decode speed and frame agreement with fp32, side by side on espeak clips.

The work is done by tools/bench/int8_recipes.py.

Example:
    python scripts/bench_int8_recipes.py --model ~/.cache/sensestream/models/test-full \
        --json benchmarks/int8-recipes-avx2.json
"""

from tools.bench.int8_recipes import main

if __name__ == "__main__":
    raise SystemExit(main())
