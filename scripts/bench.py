"""Live-stream capacity: how many real-time streams one server holds, and latency at that load.

N simulated clients stream real espeak-ng speech (utterances of 2-12 s separated by silence)
at real-time pace in 100 ms pcm_s16le frames. Per final: latency from the moment the
utterance's last speech sample was sent to the final's arrival, also shown with the VAD's
end-silence subtracted. Per utterance: first-partial latency and the gaps between partials.
Per run: errors, dropped sessions, and the server's batch sizes, queue delay, CPU, RSS and
GPU memory from /stats and /metrics. `--find-capacity` searches for the largest N that meets
the latency criteria; `--spawn-server` runs the whole comparison (as configured and at
`--max-batch 1`) in one command. `--workers 1,2,4` spawns one server per front-end worker
count instead (`--workers N` appended to its options), the arms taking turns, and reports
each arm's capacity, latency and per-process CPU (from /proc) with its capacity over the
first arm's; `--fake-engine-ms-per-s MS` attaches every spawned server to one declared-cost
fake engine process (no model, no CPU: answers after a fixed plus a per-audio-second
delay), so only the front end costs CPU. The work is done by tools/bench/capacity/.

Examples:
    python scripts/bench.py --url ws://127.0.0.1:8765/ws --streams 1,4,16 --duration 60
    python scripts/bench.py --spawn-server models/test-full --server-args "--precision int8" \
        --find-capacity --duration 60 --json benchmarks/capacity.json --plot capacity.png
    python scripts/bench.py --spawn-server models/test-full --workers 1,2 \
        --fake-engine-ms-per-s 50 --fake-engine-fixed-ms 30 --find-capacity --duration 60 \
        --json benchmarks/workers.json
"""

from tools.bench.capacity.cli import main
from tools.bench.capacity.corpus import build_pool  # noqa: F401  (as gpu_wheels.sh loads it)

if __name__ == "__main__":
    raise SystemExit(main())
