"""Partial hold against caption revisions: decoded audio per speech second, and how much of
each partial the final changed, for several `hold_ms` (the demo model on espeak speech).

The work is done by tools/bench/partial_hold.py.

Example:
    python scripts/bench_partial_hold.py --json benchmarks/partial-hold.json
"""

from tools.bench.partial_hold import main

if __name__ == "__main__":
    raise SystemExit(main())
