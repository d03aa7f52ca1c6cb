"""Redaction through the server on the demo model: recall and precision per policy.

The work is done by tools/bench/redaction.py.

Example:
    python scripts/bench_redaction.py --json benchmarks/redaction-demo.json
"""

from tools.bench.redaction import main

if __name__ == "__main__":
    raise SystemExit(main())
