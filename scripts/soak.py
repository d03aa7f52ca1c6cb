"""Soak: thousands of short sessions over a steady concurrent load; resources must stay flat.

It records the server's RSS, open fds, threads and asyncio tasks (from /stats) over time.
After `--warmup` sessions it lets the server come to rest (no session open) and takes the
baseline there; after the rest of the sessions it takes the same reading at rest again. RSS
must have grown by less than `--max-rss-growth`, and fds, threads and tasks be back at the
baseline. The work is done by tools.soak.

Examples:
    python scripts/soak.py --spawn-server models/test-tiny --sessions 2000 --concurrency 50 \
        --json benchmarks/soak.json
    python scripts/soak.py --url ws://127.0.0.1:8765/ws --sessions 200 --concurrency 10
"""

from tools.soak.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
