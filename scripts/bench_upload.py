"""Live final latency with and without a concurrent 10-minute upload, side by side.

The work is done by tools/bench/upload/.

Examples:
    python scripts/bench_upload.py --test-model-size full --json benchmarks/upload_latency.json
    python scripts/bench_upload.py --model models/test-tiny --streams 2 --live-s 10 \
        --upload-minutes 0.5 --rounds 1 --json /tmp/upload.json
"""

from tools.bench.upload.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
