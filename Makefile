# The two commands a new user runs: `make demo` and `make test`.
# Both create .venv, install what is needed and build the local control plane
# (into ~/.cache/setpoint, outside the repo) if it is not cached yet.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: dist fuzz venv bytecode bench-deps demo test check lint typecheck layers docs-check public-api docs docs-serve unit integration e2e controlplane prometheus test-dashboards bench release-check min-deps bench-storage bench-conversion bench-converge bench-processes bench-scale bench-latency test-sharding-scale bench-sharding test-matrix test-pythons node-spike cluster-deps test-cluster image-tenants clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# Byte-compile setpoint's source and the examples. This machine (and many CI images) sets
# PYTHONDONTWRITEBYTECODE, and the package is installed editable, so without this every
# Python process the tests, the demo or the benchmarks start compiles ~1 MB of setpoint's
# source again (0.3-0.5 s of CPU each; pip does this for an installed wheel). Python still
# reads the .pyc files; a stale one (older than its source) is ignored.
bytecode: $(STAMP)
	$(PY) -m compileall -q src examples

# The benchmarks' own extra (matplotlib for the plots, the client-deps candidates).
BENCH_STAMP := $(VENV)/.bench-stamp
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench-deps: $(BENCH_STAMP)

controlplane: $(STAMP)
	$(PY) -m setpoint controlplane build

# Prometheus from Go modules into ~/.cache/setpoint/prometheus/ (the dashboards test runs it;
# ~5 CPU minutes the first time, cached afterwards).
prometheus: $(STAMP)
	$(PY) scripts/build_prometheus.py

# Issue 29 spike, by hand only (not in test, check, release-check or CI): as root, builds
# kubelet, kube-proxy and kube-scheduler (`setpoint controlplane build --nodes`, ~25 s with
# the plane's Go cache warm), starts a plane and two nodes (each a network namespace with
# containerd, kubelet and kube-proxy), runs real Pods, checks their logs and networking, and
# checks nothing is left behind (~20 s). Needs: apt-get install containerd runc
# iptables socat busybox-static. See docs/decisions/0021-nodes.md.
node-spike: controlplane
	$(PY) scripts/node_spike.py

# What worker nodes need from the distribution (`setpoint controlplane up --nodes N`, issue 29,
# decision 0021), on Debian 12, as root: containerd 1.6, runc, iptables, socat (the relay to
# kube-apiserver), a static busybox (the pause and test images), ip and nsenter. The CNI
# plugins are not among them: `setpoint controlplane build --nodes` builds them from their Go
# module, as it builds kubelet and CoreDNS.
cluster-deps:
	apt-get update
	apt-get install -y --no-install-recommends containerd runc \
		iptables nftables socat busybox-static iproute2 util-linux debootstrap

# The tenants operator's image as an OCI archive, build/tenants-operator.oci.tar, without
# Docker or a registry (`setpoint image build`; docs/controlplane.md "Build an image"): the
# first run, as root, builds the Debian base with debootstrap (~55 s, then cached); a
# rebuild ~8 s. Needs debootstrap (`make cluster-deps`). Not part of `make test` or CI.
image-tenants: $(STAMP)
	$(MAKE) -C examples/tenants docker-build SETPOINT_BIN=$(abspath $(VENV))/bin/setpoint

# tests/cluster (marker `cluster`; as root, after `make cluster-deps`): a plane with two real
# nodes runs a Deployment behind a Service, the tenants image (built here) runs as a Pod and
# turns Ready, the tenants operator deployed from config/ with `kubectl apply -k` (2
# replicas, webhooks through its Service) survives losing its leader Pod and a drained node,
# `setpoint demo --nodes 2` runs, and `setpoint controlplane down` leaves nothing behind
# (docs/controlplane.md "Nodes" has the times; +1 min for the image's base, once; ~1 min
# more with only the plane's Go cache warm). Not part of `make test` or CI.
test-cluster: controlplane bytecode
	$(PY) -m setpoint controlplane build --nodes
	$(PY) -m pytest tests/cluster -q -m cluster

# The tenants example shipped by each path (issue 33; docs/guide/scaffolding.md "Shipping:
# Helm, OLM, one manifest"): helm and the OLM checker built from Go modules (scripts/
# build_helm.py, ~5 min once) and OLM's olm-operator (scripts/build_olm.py, ~4 min once),
# then helm lint and template against kustomize, the bundle's OperatorHub validation and a
# server-side dry-run of every path on the local plane (tests/integration/cli), then, as
# root after `make cluster-deps`, on planes with one node, dist/install.yaml and the Helm
# chart installed, a Tenant converging, helm upgrade adding a CRD version and helm
# uninstall, and the OLM bundle installed by olm-operator from its CSV
# (tests/cluster/test_install_paths.py). Each part removes what it made: the pytest plugin
# stops its plane, the cluster tests run `down` and check that nothing is left. Not part
# of `make test` or CI.
.PHONY: test-install-paths
test-install-paths: controlplane bytecode
	$(PY) scripts/build_helm.py
	$(PY) scripts/build_olm.py
	$(PY) -m pytest tests/integration/cli/test_install_paths.py -q
	$(PY) -m setpoint controlplane build --nodes
	$(PY) -m pytest tests/cluster/test_install_paths.py -q -m cluster

# The generated Grafana dashboard and alerting rules evaluated by a real Prometheus scraping
# running managers (marker `dashboards`; ~8 s once the control plane is up; also in `make test`).
test-dashboards: controlplane prometheus
	$(PY) -m pytest tests/integration/observability/test_dashboards_prometheus.py -q -m dashboards

demo: controlplane bytecode
	$(PY) -m setpoint demo

# `setpoint demo --nodes 2` (issue 29; docs/controlplane.md "The demo on nodes"), as root: the
# tenants operator deployed as users deploy it, on a local plane with 2 real nodes (its image
# built here, `kubectl apply -k` of config/ with 2 replicas, the leader Pod deleted), then
# everything stopped and the host checked. Installs what nodes need (`make cluster-deps`) when
# a package is missing and builds the node binaries (cached); ~70 s once they are.
.PHONY: demo-cluster
demo-cluster: controlplane bytecode
	@test "$$(id -u)" = 0 || { echo "demo-cluster: run it as root (sudo make demo-cluster):" \
		"the nodes' kubelet and containerd manage mounts, cgroups and network namespaces"; exit 2; }
	@$(PY) -c 'from setpoint.testing.nodes import check_machine; check_machine()' 2>/dev/null \
		&& command -v debootstrap >/dev/null \
		|| { echo "demo-cluster: installing what nodes need (make cluster-deps)"; $(MAKE) cluster-deps; }
	$(PY) -m setpoint controlplane build --nodes
	$(PY) -m setpoint demo --nodes 2

LINTED := src tests bench examples scripts docs/conf.py docs/_ext

lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

typecheck: $(STAMP)
	$(VENV)/bin/mypy

layers: $(STAMP)
	$(VENV)/bin/lint-imports

# The documentation site: guides from docs/, the API reference generated from the public
# surface. Strict: a broken link, an unresolved reference or a docstring that does not render
# fails the build. Output in build/docs/ (ignored); -E: a fresh environment every time, so a
# warning in an unchanged page is never skipped.
DOCS_OUT := build/docs
docs: $(STAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -n -E -q -b html -d $(DOCS_OUT)/doctrees docs $(DOCS_OUT)/html
	@echo "site: $(DOCS_OUT)/html/index.html"

DOCS_PORT ?= 8000
docs-serve: docs
	$(PY) -m http.server --bind 127.0.0.1 --directory $(DOCS_OUT)/html $(DOCS_PORT)

docs-check: $(STAMP) docs
	$(PY) scripts/gen_test_index.py --check

public-api: $(STAMP)
	$(PY) scripts/gen_public_api.py --check

check: lint typecheck layers docs-check public-api

# Unit tests (tests/unit and the examples' test_unit_*.py): no control plane is built or
# started; everything marked integration or e2e is deselected.
unit: bytecode
	$(PY) -m pytest tests/unit examples -q -m "not integration and not e2e"

# Tests against the real local control plane (marker `integration`: tests/integration).
integration: controlplane prometheus bytecode
	$(PY) -m pytest tests/integration -q -m integration

# Complete operators end to end (marker `e2e`: tests/e2e and the examples' cluster tests).
e2e: controlplane bytecode
	$(PY) -m pytest tests/e2e examples -q -m e2e

test: controlplane prometheus check bytecode
	$(PY) -m pytest -q -m "not release"

# The fuzz tests (hypothesis, tests/unit/*/test_*fuzz.py: kubeconfig loader, watch decoder,
# selector parser, structural validator, admission reviews, the servers' HTTP/1.1 parser, the
# client's HTTP/1.1 answer parser)
# with far more examples than the few hundred CI runs (the admission-review test keeps its
# fixed 100). Each may fail only with the documented error types. FUZZ_EXAMPLES=20000 for a longer run; a failing example
# is kept in ~/.cache/setpoint/hypothesis/ (tests/conftest.py) and replayed first next time.
FUZZ_EXAMPLES ?= 5000
fuzz: $(STAMP)
	SETPOINT_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q $(wildcard tests/unit/*/test_*fuzz.py)

# The schema validator's differential test (issue 31) with many more cases than the suite's
# 500: generated schemas and objects, setpoint's verdicts compared with the local control
# plane's (dry-run creates), in CRDs of 500 cases each, from a random seed (printed with any
# disagreement; SEED= replays one). ~15 s per 500 cases.
VALIDATOR_DIFF_CASES ?= 3000
VALIDATOR_DIFF_SEED ?= $(shell od -An -N2 -tu2 /dev/urandom | tr -d ' ')
test-validator-diff: controlplane bytecode
	SETPOINT_VALIDATOR_DIFF_CASES=$(VALIDATOR_DIFF_CASES) SETPOINT_VALIDATOR_DIFF_SEED=$(if $(SEED),$(SEED),$(VALIDATOR_DIFF_SEED)) \
		$(PY) -m pytest -q tests/integration/crd/test_crd_validator_diff.py -k generated

# The compatibility matrix (docs/compatibility.md): builds each supported Kubernetes release
# (~10-20 CPU-minutes each, cached in ~/.cache/setpoint/controlplane/<version>) and runs the
# integration and e2e suites on it (SETPOINT_CONTROLPLANE_VERSION). Not in CI, which stays
# on the default release. MATRIX_VERSIONS="v1.36.3" narrows it.
MATRIX_VERSIONS ?=
test-matrix: $(STAMP)
	$(PY) scripts/test_matrix.py $(if $(MATRIX_VERSIONS),--versions $(MATRIX_VERSIONS),)

# The unit suite (as `make unit` runs it) on every supported Python: 3.11, 3.12 and 3.13,
# each found in pyenv (~/.pyenv/versions) or on PATH, in its own venv outside the checkout
# (~/.cache/setpoint/venvs/py3.X, reused while pyproject.toml is unchanged) with `.[dev]`
# installed (scripts/test_pythons.py). Not in `make test` (a whole unit run per version, CI
# time): run by hand before a release, its table recorded in docs/compatibility.md.
# PYTHONS="3.12 3.13" narrows it; PYTHONS_ARGS="--commit HEAD" tests the last commit alone.
PYTHONS ?=
PYTHONS_ARGS ?=
test-pythons: $(STAMP)
	$(PY) scripts/test_pythons.py $(if $(PYTHONS),--versions $(PYTHONS),) $(PYTHONS_ARGS)

# A short run of the converge benchmark (floor, setpoint, setpoint-lean; no kopf or Go
# needed): BENCH_N Widgets, one round. The table is printed; the JSON goes to
# ~/.cache/setpoint/bench/converge-<date>.json. Full runs and the other scripts:
# docs/benchmarks.md.
BENCH_N ?= 200
bench: controlplane
	$(PY) bench/converge/run.py --n $(BENCH_N) --repeat 1 --impls floor,setpoint,setpoint-lean

# The converge benchmark in full (floor, setpoint, setpoint-lean, kopf, controller-runtime;
# 2,000 Widgets, 3 interleaved rounds, 15-30 minutes). Not run by CI.
bench-converge: controlplane
	$(PY) bench/converge/run.py --n 2000 --repeat 3

# Issue 34: setpoint in 1 and 2 worker processes (bench/converge/processes.py): the CPU-bound
# converge variant (~20 ms of Python per Widget) against its floor, the light converge with
# --processes 1 and 2 beside controller-runtime, latency at 50 creates/s; PROCESSES_PARTS
# picks parts (cpu,light,latency). 2,000 Widgets, 3 rounds: 40-50 minutes. Not run by CI.
PROCESSES_PARTS ?= cpu,light,latency
bench-processes: controlplane
	$(PY) bench/converge/processes.py --n 2000 --repeat 3 --parts $(PROCESSES_PARTS)

# How the cost grows (bench/converge/scale.py): converge runs at N = 500, 2,000 and 10,000
# for setpoint and controller-runtime, plotted to docs/benchmarks-scale.png; then cache-only
# syncs of 10,000 and 50,000 Widgets (setpoint streaming, setpoint paginated,
# controller-runtime) with the API server's memory. 30-60 minutes. Not run by CI.
bench-scale: controlplane bench-deps
	$(PY) bench/converge/scale.py curves --ns 500,2000,10000
	$(PY) bench/converge/scale.py cache --n 10000
	$(PY) bench/converge/scale.py cache --n 50000

# Create->Ready latency at a steady 50 Widgets per second for a minute, setpoint beside
# controller-runtime, plotted to docs/benchmarks-latency.png. About 10 minutes.
bench-latency: controlplane bench-deps
	$(PY) bench/converge/scale.py latency --rate 50 --seconds 60

# The wheel as a user gets it: build sdist and wheel, twine check, install into a fresh
# virtualenv outside the checkout, build or reuse the control plane through the installed
# setpoint, run an operator project's unit and integration tests there (scripts/release_check.py);
# then the tests marked `release` (the scaffolding path from an empty directory), which
# `make test` leaves out for time. Last, the deployment path's smoke (issue 29; as root, as CI
# runs it): what nodes need (`make cluster-deps` when a package is missing, then kubelet,
# kube-proxy and kube-scheduler, cached after the first build), and a scaffolded project's
# `make test-e2e` (tests/cluster/test_scaffold_e2e.py: its image on a plane with one node,
# deployed from config/ and reconciling its sample; ~90 s). Not root, or a node that cannot
# start: it fails, never skips.
release-check: $(STAMP) controlplane
	$(PY) scripts/release_check.py
	$(PY) -m pytest -q -m release
	@$(PY) -c 'from setpoint.testing.nodes import check_machine; check_machine()' 2>/dev/null \
		&& command -v debootstrap >/dev/null \
		|| { echo "release-check: installing what nodes need (make cluster-deps)"; $(MAKE) cluster-deps; }
	$(PY) -m setpoint controlplane build --nodes
	$(PY) -m pytest -q -m cluster tests/cluster/test_scaffold_e2e.py

# The sdist and the wheel (the README's install step), into build/dist/, which is ignored:
# nothing lands in the checkout's tracked tree. Needs only python3: the .venv it makes has
# `build`. Stale setuptools staging (build/lib) is removed first, so no old file slips into
# the wheel. Then: pip install 'build/dist/setpoint-<version>-py3-none-any.whl[testing]'.
DIST_OUT := build/dist
dist: $(STAMP)
	rm -rf $(DIST_OUT) build/lib build/bdist.*
	$(PY) -m build --outdir $(DIST_OUT) .
	@echo "wheel: $$(ls $(DIST_OUT)/*.whl)"

# Every dependency at the lowest version its range allows, then the unit tests
# (scripts/min_deps.py; last result in docs/packaging.md).
min-deps: $(STAMP)
	$(PY) scripts/min_deps.py

# Storage-version migration of 2,000 objects (setpoint's writes and in-tree methods
# against a floor); CI runs the same code on a small N (tests/integration/migrate).
bench-storage: controlplane
	$(PY) bench/migrate/storage.py --n 2000

# Conversion through the webhook, setpoint beside controller-runtime (its Go peer
# and the Go review driver are built into ~/.cache/setpoint/bench/): direct reviews posted
# by the Go driver, as kube-apiserver posts them, and a list of 2,000 objects through
# kube-apiserver, 5-15 minutes depending on the machine's load. Not run by CI.
bench-conversion: controlplane
	$(PY) bench/conversion/run.py --objects 2000

# Sharding at scale (issue 16, decision 0011; bench/shards/run.py, results in
# docs/benchmarks.md): three replica processes and SHARD_N objects, one SIGKILLed, one
# joining, no reconcile of one object by two replicas at once (exit 1 on a failed check).
# CI runs the same code on 2 replicas and 300 objects (tests/integration/sharding/).
SHARD_N ?= 3000
test-sharding-scale: controlplane
	$(PY) bench/shards/run.py scale --n $(SHARD_N)

# Converge time and per-replica memory for 1, 2 and 3 replicas (and one unsharded replica)
# at SHARD_BENCH_N objects, each on a fresh control plane.
SHARD_BENCH_N ?= 6000
bench-sharding: controlplane
	$(PY) bench/shards/run.py bench --n $(SHARD_BENCH_N)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build docs/api
