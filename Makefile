# Thin wrappers only; each target bootstraps what it needs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.jetraft-installed

.PHONY: setup test bench lab clean wheelhouse

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# jetraft's wheel and every dependency, for hosts with no route to a package index
wheelhouse: setup
	$(BIN)/python -m pip wheel --quiet --wheel-dir build/wheelhouse .

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python tests/bench/core.py
	$(BIN)/python tests/bench/subjects.py
	$(BIN)/python tests/bench/raft.py
	$(BIN)/python tests/bench/raft_storage.py
	$(BIN)/python tests/bench/jetstream.py
	$(BIN)/python tests/bench/cluster.py

lab: setup
	@echo "make lab: the five-host lab arrives with the appliance roles; it is not built yet." >&2
	@exit 2

clean:
	rm -rf $(VENV) build server/*.egg-info .pytest_cache .hypothesis
