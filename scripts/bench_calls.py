"""Concurrent stereo calls against the same load as mono streams, side by side in one run.

N two-party calls (8 kHz μ-law, each channel speaking about half the time, turns that
sometimes overlap) stream live over protocol v1 as multichannel stereo, and the same calls
as 2N mono streams; rounds alternate, and the JSON holds both arms' final latency after
the VAD, partial timing, errors, server CPU and batches, their B/A ratios and the verdict
against docs/benchmarks.md's bounds. The work is done by tools/bench/calls/.

Examples:
    python scripts/bench_calls.py --spawn-server models/test-full --server-args "--precision int8" \
        --json benchmarks/calls-stereo-vs-mono.json --plot benchmarks/calls-stereo-vs-mono.png
    # the defaults: --calls 4 --rounds 4 --duration 60 (about 9 minutes); a sweep: --calls 2,4,6
    python scripts/bench_calls.py --spawn-server models/test-tiny --calls 1 --rounds 1 \
        --duration 10 --json /tmp/calls.json
"""

from tools.bench.calls.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
