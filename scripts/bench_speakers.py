"""Who spoke: diarization error rate of files and live streams, the speaker count, and
known speakers named, on synthetic conversations (the demo model and Resemblyzer's
speaker encoder on one server).

The work is done by tools/bench/speakers.py.

Example:
    python scripts/bench_speakers.py --json benchmarks/speakers-demo.json
"""

from tools.bench.speakers import main

if __name__ == "__main__":
    raise SystemExit(main())
