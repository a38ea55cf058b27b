# The two commands a new user needs: `make demo` and `make test`. Both set up a fresh machine first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup system-packages demo test render lint bench clean

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

test: setup
	$(BIN)/python -m pytest -q
	$(BIN)/gpuaas render --check

render: setup
	$(BIN)/gpuaas render

lint: setup
	$(BIN)/ruff check .

bench: setup
	$(BIN)/python benchmarks/steps.py
	$(BIN)/python benchmarks/engine.py
	$(BIN)/python benchmarks/simulate.py

clean:
	rm -rf $(VENV) demo-report .pytest_cache
