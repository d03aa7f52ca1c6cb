"""Our engine against sherpa-onnx 1.12.40 on the same weights, in alternating rounds.

The work is done by tools/bench/peers/. sherpa-onnx runs from a side environment:
    python3 -m venv ~/.cache/sensestream/peers/sherpa
    ~/.cache/sensestream/peers/sherpa/bin/pip install sherpa-onnx==1.12.40 numpy

Example:
    python scripts/bench_peers.py --model ~/.cache/sensestream/models/test-full \
        --json benchmarks/peers-int8.json
"""

from tools.bench.peers.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
