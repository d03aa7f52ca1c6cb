"""Our server against sherpa-onnx 1.12.40's non-streaming server under whole-utterance load.

The work is done by tools/bench/peers/server_cli.py, whose help says what to set up once.

Example:
    python scripts/bench_server_peers.py --model ~/.cache/sensestream/models/test-full \
        --json benchmarks/server-peers-int8.json
"""

from tools.bench.peers.server_cli import main

if __name__ == "__main__":
    raise SystemExit(main())
