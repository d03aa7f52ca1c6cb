#!/usr/bin/env bash
# One prepared check for a GPU host: install, build the full test model, engine benchmarks
# (the GPU path as served: features on the device and CUDA graphs; and without both, side
# by side), parity, GPU tests, ONNX Runtime on CUDA where installed, short server
# benchmarks and a profile under live load, all within about 9 minutes.
#
# Every step runs under `timeout` (capped by what is left of the overall deadline), logs to
# $OUT/<step>.log and is recorded in $OUT/steps.jsonl, so one failing step loses nothing
# else. $OUT/gpu_check.json gathers the steps, the environment and the key numbers.
#
# Usage:
#   OUT=/some/dir scripts/gpu_check.sh            # on the GPU host (wheels from .whl/)
#   scripts/gpu_check.sh --dry-run                # here: same steps, CPU, tiny model
# Environment: OUT (default: a new temp dir), PYTHON (default python3, or .venv's python
# in a dry run), DEADLINE_S (default 520), GPU_CHECK_WORK (default /tmp/sensestream-gpu),
# GPU_CHECK_TTS=cache (use .whl/bench-speech even where espeak-ng exists, to test that path).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

DRY_RUN=0
if [[ ${1:-} == --dry-run ]]; then DRY_RUN=1; fi
OUT=${OUT:-$(mktemp -d /tmp/gpu-check.XXXXXX)}
mkdir -p "$OUT"
WORK=${GPU_CHECK_WORK:-/tmp/sensestream-gpu}
mkdir -p "$WORK"
START=$(date +%s)
DEADLINE=$((START + ${DEADLINE_S:-520}))
STEPS="$OUT/steps.jsonl"
: >"$STEPS"

if ((DRY_RUN)); then
  PY=${PYTHON:-$REPO/.venv/bin/python}
  DEVICE=cpu PRECISION=fp32 SIZE=tiny
  BATCHES=1,2 SECONDS_LIST=2,10 REPEATS=1 PARITY_SECONDS=1,3
  EAGER_BATCHES=1,2 EAGER_SECONDS=2
  # The CPU has no graphs to capture, but it runs the device-feature path.
  GPU_PATH="--device-features on"
  STREAMS=2 DURATION=6 PROFILE_STREAMS=2 PROFILE_DURATION=10
  SWEEP_WORKERS=2 SWEEP_STREAMS=2,4 SWEEP_DURATION=6
else
  PY=${PYTHON:-python3}
  DEVICE=cuda PRECISION=fp16 SIZE=full
  BATCHES=1,2,4,8,16,32,64 SECONDS_LIST=3,10,15 REPEATS=5 PARITY_SECONDS=2,5,10
  # Issue 37: the same engine with device features and CUDA graphs off (the path before).
  EAGER_BATCHES=1,4,16,64 EAGER_SECONDS=10,15
  GPU_PATH="" # torch on CUDA: device features and graphs are on by default
  STREAMS=16,64 DURATION=20 PROFILE_STREAMS=96 PROFILE_DURATION=20
  # Issue 36: worker processes (cores less the engine's and one for the supervisor and
  # the load generator), aiming past 256 live streams at final-after-VAD p95 <= 1 s.
  SWEEP_WORKERS=$(($(nproc) > 3 ? $(nproc) - 2 : 2)) SWEEP_STREAMS=64,128,256,512 SWEEP_DURATION=20
fi
MODEL="$WORK/models/test-$SIZE"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"

# record NAME STATUS RC SECONDS NOTE: one JSON line per step.
record() {
  "$PY" -c 'import json, sys; n, s, rc, t, note = sys.argv[1:]
print(json.dumps({"step": n, "status": s, "rc": int(rc), "seconds": float(t), "note": note}))' \
    "$@" >>"$STEPS" || echo "{\"step\": \"$1\", \"status\": \"$2\"}" >>"$STEPS"
}

skip() { # skip NAME REASON
  echo "== $1: skipped ($2)"
  record "$1" skipped 0 0 "$2"
}

# step NAME CAP_S COMMAND...: run under timeout; returns the command's status.
step() {
  local name=$1 cap=$2
  shift 2
  local left=$((DEADLINE - $(date +%s) - 10))
  if ((left < 15)); then
    skip "$name" "out of time before it started"
    return 1
  fi
  local limit=$((cap < left ? cap : left))
  local t0 rc status ms
  t0=$(date +%s%N)
  echo "== $name (limit ${limit}s)"
  # The steps are shell functions: a child bash runs them, in timeout's process group so
  # that a server a step spawned dies with it.
  timeout -k 10 "$limit" bash -c '"$@"' _ "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  case $rc in
    0) status=ok ;;
    124 | 137) status=timeout ;;
    *) status=failed ;;
  esac
  record "$name" "$status" "$rc" "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))" \
    "log: $name.log"
  echo "   $status (rc $rc)"
  tail -n 3 "$OUT/$name.log" | sed 's/^/   | /'
  return $rc
}

environment() {
  "$PY" - "$OUT/env.json" <<'EOF'
import json, os, shutil, sys
info = {"python": sys.version.split()[0], "cpus": len(os.sched_getaffinity(0))}
try:
    import torch
    info["torch"] = torch.__version__
    info["torch_cuda"] = torch.version.cuda
    info["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        info["gpu"] = torch.cuda.get_device_name()
        info["gpu_count"] = torch.cuda.device_count()
        info["gpu_free_bytes"], info["gpu_total_bytes"] = free, total
        info["bf16"] = torch.cuda.is_bf16_supported()
except ImportError as exc:
    info["torch"] = f"missing: {exc}"
try:
    import onnxruntime as ort
    info["onnxruntime"] = ort.__version__
    info["ort_providers"] = ort.get_available_providers()
except ImportError as exc:
    info["onnxruntime"] = f"missing: {exc}"
info["espeak_ng"] = shutil.which("espeak-ng") is not None
info["sox"] = shutil.which("sox") is not None
json.dump(info, open(sys.argv[1], "w"), indent=1)
print(json.dumps(info))
EOF
}

install_wheels() {
  rm -rf /tmp/site
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
}

check_imports() {
  "$PY" -c 'import funasr
from funasr.models.sense_voice.model import SenseVoiceSmall
import server.app, engine.backends.parity, streaming.vad.fsmn
from streaming.vad.fsmn import FsmnVadModel
FsmnVadModel.from_package()
print("imports ok")'
}

build_model() {
  if [[ -f $MODEL/model.pt && -f $MODEL/sensestream_test_model.json ]]; then
    echo "reusing $MODEL"
    return 0
  fi
  "$PY" scripts/make_test_model.py --size "$SIZE" --out "$MODEL"
}

bench_torch() { # the GPU path as served: features on the device, CUDA graphs
  "$PY" scripts/bench_engine.py --model "$MODEL" --backend torch --device "$DEVICE" \
    --precision "$PRECISION" --batch "$BATCHES" --seconds "$SECONDS_LIST" $GPU_PATH \
    --repeats "$REPEATS" --feature-threads 8 --json "$OUT/bench_engine_torch_$PRECISION.json"
}

bench_torch_eager() { # the path before issue 37: features on CPU threads, no graphs
  "$PY" scripts/bench_engine.py --model "$MODEL" --backend torch --device "$DEVICE" \
    --precision "$PRECISION" --batch "$EAGER_BATCHES" --seconds "$EAGER_SECONDS" \
    --device-features off --cuda-graphs off --repeats "$REPEATS" --feature-threads 8 \
    --json "$OUT/bench_engine_torch_${PRECISION}_eager.json"
}

parity() { # parity PRECISION: the served path (from features and from raw audio)
  "$PY" -m engine.backends.parity --model "$MODEL" --backend torch --device "$DEVICE" \
    --precision "$1" --seconds "$PARITY_SECONDS" $GPU_PATH --json "$OUT/parity_torch_$1.json"
}

gpu_tests() {
  "$PY" -m pytest -p no:cacheprovider -m gpu tests/engine -q -rs --timeout 300 \
    --junitxml "$OUT/gpu_tests.xml"
}

# bench.py needs espeak-ng and sox only to fill its speech cache; .whl/bench-speech
# (made by gpu_wheels.sh) holds every sentence, so stand-ins that refuse to run suffice.
speech_dir() {
  if [[ ${GPU_CHECK_TTS:-auto} != cache ]] && command -v espeak-ng >/dev/null &&
    command -v sox >/dev/null; then
    echo "$WORK/bench-speech"
    return 0
  fi
  [[ -d .whl/bench-speech ]] || return 1
  mkdir -p "$WORK/no-tts"
  for tool in espeak-ng sox; do
    printf '#!/bin/sh\necho "%s is not installed; bench speech must come from the cache" >&2\nexit 127\n' \
      "$tool" >"$WORK/no-tts/$tool"
    chmod +x "$WORK/no-tts/$tool"
  done
  echo "$REPO/.whl/bench-speech"
}

server_bench() { # server_bench SPEECH_DIR JSON_NAME [MORE SERVER ARGS]
  # The refusing stand-ins only shadow real tools when the speech comes from the cache
  # (a stale $WORK/no-tts from an earlier cache run must not hide a real espeak-ng).
  local path=$PATH
  if [[ $1 == "$REPO/.whl/bench-speech" ]]; then path="$WORK/no-tts:$PATH"; fi
  PATH="$path" "$PY" scripts/bench.py --spawn-server "$MODEL" --no-baseline \
    --server-args "--backend torch --device $DEVICE --precision $PRECISION ${3:-}" \
    --streams "$STREAMS" --duration "$DURATION" --speech-dir "$1" \
    --server-timeout-s 200 --drain-timeout-s 60 --json "$OUT/$2"
}

workers_sweep() { # workers_sweep SPEECH_DIR: live capacity with worker processes
  local path=$PATH
  if [[ $1 == "$REPO/.whl/bench-speech" ]]; then path="$WORK/no-tts:$PATH"; fi
  PATH="$path" "$PY" scripts/bench.py --spawn-server "$MODEL" --no-baseline \
    --server-args "--backend torch --device $DEVICE --precision $PRECISION --workers $SWEEP_WORKERS" \
    --streams "$SWEEP_STREAMS" --duration "$SWEEP_DURATION" --speech-dir "$1" \
    --server-timeout-s 200 --drain-timeout-s 60 --json "$OUT/bench_server_workers.json"
}

server_profile() { # py-spy on the server's threads under live load (scripts/gpu_profile.sh)
  OUT="$OUT/profile" DEVICE="$DEVICE" PRECISION="$PRECISION" SIZE="$SIZE" GPU_CHECK_WORK="$WORK" \
    N="$PROFILE_STREAMS" DUR="$PROFILE_DURATION" scripts/gpu_profile.sh
}

ort_ready() {
  "$PY" -c 'import onnxruntime as o, sys
sys.exit(0 if "CUDAExecutionProvider" in o.get_available_providers() else 1)'
}

ort_cuda() { # the ONNX Runtime side: export, parity and benchmark
  local precision=$1 device=$2
  local flag="--$precision"
  [[ $precision == fp32 ]] && flag=""
  "$PY" scripts/export_onnx.py --model "$MODEL" $flag &&
    "$PY" -m engine.backends.parity --model "$MODEL" --backend onnx --device "$device" \
      --precision "$precision" --seconds "$PARITY_SECONDS" \
      --json "$OUT/parity_onnx_$precision.json" &&
    "$PY" scripts/bench_engine.py --model "$MODEL" --backend onnx --device "$device" \
      --precision "$precision" --batch "$BATCHES" --seconds 10 --repeats "$REPEATS" \
      --feature-threads 8 --json "$OUT/bench_engine_onnx_$precision.json"
}

summarise() {
  "$PY" - "$OUT" "$DRY_RUN" "$START" <<'EOF' >"$OUT/gpu_check.json"
import json, os, sys, time
from pathlib import Path
out, dry, start = Path(sys.argv[1]), sys.argv[2] == "1", float(sys.argv[3])
def load(name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError):
        return None
steps = [json.loads(l) for l in (out / "steps.jsonl").read_text().splitlines() if l.strip()]
def gpu_path(served, eager, parity):
    """Issue 37: the served GPU path against the eager one, case by case, and its goals."""
    if served is None:
        return None
    cases = {(c["batch"], c["seconds"]): c for c in served.get("cases", []) if "error" not in c}
    rows = []
    for c in (eager or {}).get("cases", []):
        s = cases.get((c.get("batch"), c.get("seconds")))
        if s is None or "error" in c:
            continue
        rows.append({"batch": c["batch"], "seconds": c["seconds"],
                     "wall_ms": [round(s["wall_s"] * 1000, 2), round(c["wall_s"] * 1000, 2)],
                     "model_ms": [s["model_ms"], c["model_ms"]],
                     "end_to_end_speedup": round(c["wall_s"] / s["wall_s"], 3),
                     "model_speedup": round(c["model_ms"] / s["model_ms"], 3)})
    t = served.get("targets", {})
    best64 = max((c["audio_s_per_s"] for c in cases.values() if c["batch"] == 64), default=None)
    return {"columns": "[served, eager]", "rows": rows,
            "features_on_device": served.get("features_on_device"),
            "graph_buckets": served.get("graph_buckets"),
            "batch64_end_to_end_audio_s_per_s": best64, "goal_batch64": 5000,
            "batch1_10s_model_ms": t.get("batch1_10s_model_ms"), "goal_model_ms": 15,
            "batch1_10s_end_to_end_ms": t.get("batch1_10s_end_to_end_ms"), "goal_end_to_end_ms": 25,
            "parity_frame_agreement_mean": (parity or {}).get("frame_agreement_mean"),
            "parity_audio_frame_agreement_mean": (parity or {}).get("audio_frame_agreement_mean"),
            "goal_parity": 0.98}
report = {"dry_run": dry, "seconds": round(time.time() - start, 1), "env": load("env.json"),
          "steps": steps, "engine": {}, "parity": {}}
for path in sorted(out.glob("bench_engine_*.json")):
    data = load(path.name) or {}
    report["engine"][path.stem] = {k: data.get(k) for k in ("backend", "gpu", "memory_budget_bytes", "cost_scale", "targets")}
for path in sorted(out.glob("parity_*.json")):
    data = load(path.name) or {}
    report["parity"][path.stem] = {k: v for k, v in data.items() if k != "clips"}
def runs(name):
    data = load(name)
    if data is None:
        return None
    out = []
    for target in data.get("servers", {}).values():
        for run in target.get("runs", []):
            lat, srv = run.get("latency", {}), run.get("server", {})
            out.append({"streams": run.get("streams"), "finals": run.get("finals"),
                        "final_after_vad_p95_ms": lat.get("final_after_vad_ms", {}).get("p95"),
                        "partial_gap_p95_ms": lat.get("partial_interval_ms", {}).get("p95"),
                        "cpu_percent_mean": srv.get("cpu_percent_mean"),
                        "busy_audio_s_per_s": srv.get("busy_audio_s_per_s")})
    return out
# Only 8 files come back from the host: the key numbers ride in this one.
report["server_bench"] = {"vad_thread": runs("bench_server_vad_thread.json"),
                          "workers": runs("bench_server_workers.json"),
                          "profiled": runs("profile/bench.json")}
sweep = [r for r in report["server_bench"]["workers"] or [] if r["final_after_vad_p95_ms"] is not None]
passing = [r["streams"] for r in sweep if r["final_after_vad_p95_ms"] <= 1000 and r["finals"]]
report["workers_sweep"] = {"workers": os.environ.get("SWEEP_WORKERS"),
                           "most_streams_p95_under_1s": max(passing, default=None)}
profile = load("profile/profile.json") or {}
report["profile_threads"] = {
    name: {"share_of_samples": t.get("share_of_samples"), "busy": t.get("busy_share_of_thread"),
           "top": [(f.get("frame"), f.get("share_of_thread")) for f in t.get("top_frames", [])[:5]]}
    for name, t in profile.get("threads", {}).items()}
report["gpu_path"] = gpu_path(load(f"bench_engine_torch_{os.environ['PRECISION']}.json"),
                              load(f"bench_engine_torch_{os.environ['PRECISION']}_eager.json"),
                              load(f"parity_torch_{os.environ['PRECISION']}.json"))
print(json.dumps(report, indent=1))
EOF
}

export OUT WORK REPO PY DEVICE PRECISION SIZE MODEL BATCHES SECONDS_LIST REPEATS \
  PARITY_SECONDS EAGER_BATCHES EAGER_SECONDS GPU_PATH STREAMS DURATION PROFILE_STREAMS \
  PROFILE_DURATION SWEEP_WORKERS SWEEP_STREAMS SWEEP_DURATION
export -f environment install_wheels check_imports build_model bench_torch bench_torch_eager \
  parity gpu_tests server_bench server_profile ort_cuda workers_sweep
trap 'summarise; echo "== summary: $OUT/gpu_check.json"' EXIT

echo "gpu_check: out=$OUT dry_run=$DRY_RUN device=$DEVICE model=$MODEL"
step env 30 environment
if ((DRY_RUN)); then
  skip install "dry run: this checkout's environment"
else
  step install 90 install_wheels
  export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
step imports 90 check_imports
step model 150 build_model
step bench_torch 180 bench_torch
step bench_torch_eager 120 bench_torch_eager
step parity_torch 120 parity "$PRECISION"
step gpu_tests 150 gpu_tests
if ((DRY_RUN)); then
  step onnx 120 ort_cuda int8 cpu # the same step on the CPU provider
elif ort_ready; then
  step onnx_cuda 200 ort_cuda fp16 "$DEVICE"
else
  # onnxruntime-gpu's wheel (300 MB for 1.23.2) is over the device tool's 64 MiB carry.
  skip onnx_cuda "onnxruntime has no CUDAExecutionProvider here (a CPU-only wheel): ORT-CUDA not measured"
fi
if SPEECH=$(speech_dir); then
  # Issue 36: live streams through worker processes and an engine process.
  step workers_sweep 200 workers_sweep "$SPEECH"
  # One process, the VAD on its own thread (the default beside a GPU).
  step server_bench_vad_thread 150 server_bench "$SPEECH" bench_server_vad_thread.json --vad-thread
else
  skip workers_sweep "espeak-ng/sox are absent and .whl/bench-speech was not made (gpu_wheels.sh)"
fi
if ((!DRY_RUN)); then
  step parity_torch_bf16 90 parity bf16
fi
# Last, as it is the step most worth losing to the deadline (the 2026-12-04b run has one):
# where the server's time goes.
if [[ -x .whl/tools/py-spy && -d .whl/bench-speech ]]; then
  step server_profile 150 server_profile
else
  skip server_profile ".whl/tools/py-spy or .whl/bench-speech missing (gpu_wheels.sh)"
fi
