# Two entry points do all the set-up on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv system-deps serve test lint typecheck unit bench-engine clean

venv: $(STAMP)

# torch first, pinned, so no later requirement pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

serve: venv
	$(PY) -m server $(ARGS)

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: venv
	$(PY) -m mypy

system-deps:
	bash scripts/system_deps.sh

unit: venv system-deps
	$(PY) -m pytest $(PYTEST_ARGS)

test: lint typecheck unit

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
