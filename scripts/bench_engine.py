"""Engine throughput: audio-seconds per second, RTF and peak memory per batch size and length.

The work is done by tools/bench/engine.py.

Examples:
    python scripts/bench_engine.py --model models/test-full --backend onnx --precision int8 \
        --batch 1,2,4,8,16 --seconds 3,10,30 --json benchmarks/engine-onnx-int8.json
    python scripts/bench_engine.py --model models/test-full --backend torch --device cuda \
        --precision fp16 --batch 1,2,4,8,16,32,64 --seconds 10 --feature-threads 8 \
        --json benchmarks/engine-torch-fp16-cuda.json
"""

from tools.bench.engine import main

if __name__ == "__main__":
    raise SystemExit(main())
