# Thin wrappers only; each target bootstraps what it needs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.jetraft-installed

.PHONY: setup test bench fuzz lab lab-deps clean wheelhouse

# Debian packages the lab needs on this machine (systemd-nspawn, debootstrap, ...).
LAB_DEBS := debootstrap systemd-container xfsprogs openssh-client iproute2 vagrant vagrant-libvirt

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,lab,validation]'
	touch $(STAMP)

# jetraft's wheel and every dependency, for hosts with no route to a package index
wheelhouse: setup
	$(BIN)/python -m pip wheel --quiet --wheel-dir build/wheelhouse .

lab-deps:
	@dpkg -s $(LAB_DEBS) >/dev/null 2>&1 || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(LAB_DEBS); }

# The whole suite, then the lab end to end (site.yml, testinfra, drills); the lab is removed.
test: setup lab-deps wheelhouse
	$(BIN)/python -m pytest
	$(BIN)/python -m lab run

bench: setup
	$(BIN)/python tests/bench/core.py
	$(BIN)/python tests/bench/subjects.py
	$(BIN)/python tests/bench/raft.py
	$(BIN)/python tests/bench/raft_storage.py
	$(BIN)/python tests/bench/jetstream.py
	$(BIN)/python tests/bench/cluster.py
	$(BIN)/python tests/bench/tls.py
	$(BIN)/python tests/bench/validation.py
	$(BIN)/python tests/bench/hostile.py
	$(BIN)/python tests/bench/hostile_json.py
	$(BIN)/python tests/bench/stream_subjects.py

# Every fuzz target in tests/fuzz for FUZZ_SECONDS each, one after another; crash inputs and
# logs in build/fuzz/. FUZZ_STRICT=1: the known crash classes stop a target too.
FUZZ_SECONDS ?= 600
fuzz: setup
	$(BIN)/python tests/fuzz/run.py --seconds $(FUZZ_SECONDS) $(if $(filter 1,$(FUZZ_STRICT)),--strict)

# The main job end to end; the lab stays up afterwards (python -m lab down removes it).
lab: setup lab-deps wheelhouse
	$(BIN)/python -m lab run --keep

clean:
	rm -rf $(VENV) build server/*.egg-info .pytest_cache .hypothesis
