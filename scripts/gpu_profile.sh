#!/usr/bin/env bash
# Where the time goes in a loaded live server on a GPU host: one server, N live streams
# from scripts/bench.py, and a py-spy profile of the server's threads meanwhile.
#
# Carry .whl (scripts/gpu_wheels.sh fills it, py-spy included) and run on the host:
#   N=96 DUR=20 scripts/gpu_profile.sh            # writes $OUT/{bench,profile}.json, prof.txt
# Here, as a dry run on the CPU with the tiny model:
#   OUT=/tmp/prof DEVICE=cpu PRECISION=fp32 SIZE=tiny N=2 DUR=10 scripts/gpu_profile.sh
# More server options: SERVER_ARGS (default --vad-thread).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d /tmp/gpu-profile.XXXXXX)}
DEVICE=${DEVICE:-cuda} PRECISION=${PRECISION:-fp16} SIZE=${SIZE:-full}
N=${N:-96} DUR=${DUR:-20} PORT=${PORT:-8800} SERVER_ARGS=${SERVER_ARGS:---vad-thread}
MODEL=${GPU_CHECK_WORK:-/tmp/sensestream-gpu}/models/test-$SIZE
if ((DUR < 10)); then
  echo "DUR must be at least 10 s (the profile skips the first 6 and the last 2)" >&2
  exit 2
fi
mkdir -p "$OUT"
if [[ $DEVICE == cuda ]]; then
  PY=python3
  [[ -d /tmp/site ]] || python3 -m pip install -q --no-index --no-deps --no-compile \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=$PWD:/tmp/site
else
  PY=.venv/bin/python
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1

# bench.py's speech comes from .whl/bench-speech; stand-ins make sure nothing else is used.
mkdir -p /tmp/no-tts
for tool in espeak-ng sox; do
  printf '#!/bin/sh\nexit 127\n' >/tmp/no-tts/$tool
  chmod +x /tmp/no-tts/$tool
done
[[ -f $MODEL/model.pt ]] || "$PY" scripts/make_test_model.py --size "$SIZE" --out "$MODEL" | tail -1

# shellcheck disable=SC2086  # SERVER_ARGS is a list of flags
"$PY" -m server --model "$MODEL" --backend torch --device "$DEVICE" --precision "$PRECISION" \
  --port "$PORT" --max-sessions 1000 --max-sessions-per-ip 1000 --end-silence-ms 500 \
  --partial-interval-ms 400 $SERVER_ARGS >"$OUT/server.log" 2>&1 &
server=$!
trap 'kill -INT $server 2>/dev/null; wait $server' EXIT
"$PY" - "$PORT" <<'PYEOF' || { echo "server not ready; see server.log" >&2; exit 1; }
import socket, sys, time
from tools.spawn import wait_ready
port, deadline = int(sys.argv[1]), time.monotonic() + 180
while True:  # the port opens after the imports; then /readyz long-polls the model load
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.2)
wait_ready(f"http://127.0.0.1:{port}", max(1.0, deadline - time.monotonic()))
PYEOF
# The profile skips the ramp-up and the drain: it covers the middle of the run.
(sleep 6 && .whl/tools/py-spy record -p "$server" --threads --idle -r 50 -d $((DUR - 8)) \
  -f raw -o "$OUT/prof.txt" >"$OUT/pyspy.log" 2>&1) &
profiler=$!
PATH=/tmp/no-tts:$PATH "$PY" scripts/bench.py --url "ws://127.0.0.1:$PORT/ws" --no-baseline \
  --streams "$N" --duration "$DUR" --speech-dir "$PWD/.whl/bench-speech" --drain-timeout-s 40 \
  --json "$OUT/bench.json" >"$OUT/bench.log" 2>&1
bench=$?
grep "N=" "$OUT/bench.log"
wait $profiler || { echo "py-spy failed; see pyspy.log" >&2; exit 1; }
"$PY" scripts/pyspy_summary.py "$OUT/prof.txt" --json "$OUT/profile.json" >/dev/null || exit 1
echo "profile: $OUT/profile.json"
# bench.py exits non-zero when a run misses its latency targets: the profile still stands.
[[ -f $OUT/bench.json ]] || { echo "bench.py wrote no results (status $bench)" >&2; exit 1; }
