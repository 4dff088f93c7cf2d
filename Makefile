# The two commands a new user runs: `make demo` and `make test`.
# Both create .venv, install what is needed and build the local control plane
# (into ~/.cache/setpoint, outside the repo) if it is not cached yet.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test check lint typecheck layers docs-check unit integration e2e controlplane bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

controlplane: $(STAMP)
	$(PY) -m setpoint controlplane build

demo: controlplane
	$(PY) -m setpoint demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench examples scripts
	$(VENV)/bin/ruff format --check src tests bench examples scripts

typecheck: $(STAMP)
	$(VENV)/bin/mypy

layers: $(STAMP)
	$(VENV)/bin/lint-imports

docs-check: $(STAMP)
	$(PY) scripts/gen_test_index.py --check

check: lint typecheck layers docs-check

unit: $(STAMP)
	$(PY) -m pytest tests/unit -q

test: controlplane check
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
