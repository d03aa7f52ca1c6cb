"""VAD cost at many sessions: per-frame accept() latency and CPU per audio second per session.

The work is done by tools/bench/vad.py.

Examples:
    python scripts/bench_vad.py --sessions 50 --seconds 20 --json benchmarks/vad.json
    python scripts/bench_vad.py --sessions 4 --seconds 5 --json /tmp/vad.json  # a quick look
"""

from tools.bench.vad import main

if __name__ == "__main__":
    raise SystemExit(main())
