# Two entry points do all the set-up on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RAY_STAMP := $(VENV)/.ray-installed
SPEAKER_STAMP := $(VENV)/.speaker-weights-installed
REPLICAS ?= 2
# Test processes (pytest-xdist); TEST_WORKERS=0 runs the suite in this one.
TEST_WORKERS ?= 2

.PHONY: venv ray system-deps serve replicas test lint typecheck unit image-test bench-engine clean

venv: $(STAMP) $(SPEAKER_STAMP)

# torch first, pinned, so no later requirement pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	# The repository's toolkit (tools/: benchmarks, training, soak) is not in the wheel:
	# the checkout goes on the venv's path, for scripts/ and the tests.
	$(PY) -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_path('purelib'), 'sensestream-checkout.pth').write_text('$(CURDIR)\\n')"
	touch $(STAMP)

# The speaker encoder's weights ship in the resemblyzer wheel; only the weights are read
# (engine/speakers/encoder.py), so its own dependencies (librosa, numba, the original
# webrtcvad, which builds from source) are not installed.
$(SPEAKER_STAMP): $(STAMP)
	$(PY) -m pip install -q --no-deps resemblyzer==0.1.4
	touch $(SPEAKER_STAMP)

serve: venv
	$(PY) -m server $(ARGS)

# Ray is an extra: only the engine-replica commands and the tests install it.
ray: $(RAY_STAMP)

$(RAY_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[dev,ray]'
	touch $(RAY_STAMP)

# A one-machine Ray cluster with $(REPLICAS) engine replicas; gateways attach with
# `make serve ARGS="--engine ray://auto"` (docs/deploy.md).
replicas: ray
	$(PY) -m server.replicas --local --replicas $(REPLICAS) $(ARGS)

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: ray
	$(PY) -m mypy

system-deps:
	bash scripts/system_deps.sh

unit: ray system-deps $(SPEAKER_STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

test: lint typecheck unit image-test

# The container image (deploy/container/Dockerfile) built from a clone, run, and streamed
# to: minutes the first time, then its dependency layers are reused.
# SENSESTREAM_SKIP_IMAGE=1 leaves it out (a machine without root, or a quick run).
image-test: venv
ifeq ($(SENSESTREAM_SKIP_IMAGE),1)
	@echo "image test skipped (SENSESTREAM_SKIP_IMAGE=1)"
else
	bash scripts/system_deps.sh image
	SENSESTREAM_IMAGE_TEST=1 $(PY) -m pytest tests/deploy/test_image.py
endif

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
