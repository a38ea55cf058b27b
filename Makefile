# The two commands a new user needs: `make demo` and `make test`. Both set up a fresh machine first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup system-packages demo test render lint bench clean cluster-build cluster cluster-down

setup: $(STAMP) system-packages

# Prometheus and Alertmanager are Debian packages; the tests and the demo start their own copies.
system-packages:
	@if ! command -v prometheus >/dev/null || ! command -v prometheus-alertmanager >/dev/null || ! command -v promtool >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus prometheus-alertmanager >/dev/null; \
		else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus prometheus-alertmanager >/dev/null; fi; \
	fi

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[cli,test]'
	touch $(STAMP)

demo: setup
	$(BIN)/gpuaas demo

# The real components (Kubernetes, etcd, Kueue, KEDA, KWOK, NATS, Argo) built from the Go modules
# pinned under stack/ into .stack-cache/ (or $$GPUAAS_STACK_CACHE); a second run is a cache hit.
cluster-build: setup
	$(BIN)/gpuaas cluster build

# Start the real control plane on loopback; prints `export KUBECONFIG=...`. `make cluster-down` stops it.
cluster: cluster-build
	$(BIN)/gpuaas cluster up --no-build

cluster-down: setup
	$(BIN)/gpuaas cluster down

# Both tiers: the emulated one and tests/realstack (marker `realstack`) against the real control plane.
test: setup cluster-build
	$(BIN)/python -m pytest -q
	$(BIN)/gpuaas render --check

render: setup
	$(BIN)/gpuaas render

lint: setup
	$(BIN)/ruff check .

bench: setup
	$(BIN)/python benchmarks/steps.py
	$(BIN)/python benchmarks/engine.py

clean:
	rm -rf $(VENV) demo-report .pytest_cache
