"""VAD cost at many sessions: per-frame accept() latency and CPU per audio second per session.

The work is done by tools/bench_vad.py.

Example:
    python scripts/bench_vad.py --sessions 50 --seconds 20 --json benchmarks/vad.json
"""

from tools.bench_vad import main

if __name__ == "__main__":
    raise SystemExit(main())
