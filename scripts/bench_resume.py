"""Resuming a stream after its connection drops: drop to `resumed`, and resent audio to the
next final, through a proxy that cuts the connection at random moments; the finals must
equal an uncut run's.

The work is done by tools/bench/resume.py.

Example:
    python scripts/bench_resume.py --json benchmarks/resume-demo.json
"""

from tools.bench.resume import main

if __name__ == "__main__":
    raise SystemExit(main())
