# The two commands a new user runs: `make demo` and `make test`.
# Both create .venv, install what is needed and build the local control plane
# (into ~/.cache/setpoint, outside the repo) if it is not cached yet.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: venv demo test check lint typecheck layers docs-check unit integration e2e controlplane bench clean

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

# Unit tests (tests/unit and the examples' test_unit_*.py): no control plane is built or
# started; everything marked integration or e2e is deselected.
unit: $(STAMP)
	$(PY) -m pytest tests/unit examples -q -m "not integration and not e2e"

# Tests against the real local control plane (marker `integration`: tests/integration).
integration: controlplane
	$(PY) -m pytest tests/integration -q -m integration

# Complete operators end to end (marker `e2e`: tests/e2e and the examples' cluster tests).
e2e: controlplane
	$(PY) -m pytest tests/e2e examples -q -m e2e

test: controlplane check
	$(PY) -m pytest -q

# A short run of the converge benchmark (floor, setpoint, setpoint-lean; no kopf or Go
# needed): BENCH_N Widgets, one round. The table is printed; the JSON goes to
# ~/.cache/setpoint/bench/converge-<date>.json. Full runs and the other scripts:
# docs/benchmarks.md.
BENCH_N ?= 200
bench: controlplane
	$(PY) bench/converge/run.py --n $(BENCH_N) --repeat 1 --impls floor,setpoint,setpoint-lean

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
