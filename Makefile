# Thin wrappers only; each target bootstraps what it needs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.jetraft-installed

.PHONY: setup check test bench profile fuzz lab lab-deps clean wheelhouse docs docs-serve deb

# Debian packages the lab needs on this machine (systemd-nspawn, debootstrap, ...; fuse3 for
# lab/powerloss.py and its tests; lintian for make deb and its tests).
LAB_DEBS := debootstrap systemd-container xfsprogs openssh-client iproute2 vagrant vagrant-libvirt fuse3 lintian

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,lab,validation]'
	touch $(STAMP)

# jetraft's wheel and every dependency as wheels for each supported host's Python (Debian 12:
# CPython 3.11, Debian 13: CPython 3.13) on this machine's architecture, for hosts with no route
# to a package index; checked offline for each, stale wheels removed (tools/wheelhouse.py).
# Idempotent: a second run fetches nothing and leaves the files as they were.
wheelhouse: setup
	$(BIN)/python tools/wheelhouse.py --wheelhouse build/wheelhouse

# The operator's manual (docs/, mkdocs.yml) as a site in build/site; --strict: a link to a
# missing page or anchor fails the build. docs-serve rebuilds it as you edit (127.0.0.1:8000).
DOCS_ENV := NO_MKDOCS_2_WARNING=1

docs: setup
	$(DOCS_ENV) $(BIN)/mkdocs build --strict

docs-serve: setup
	$(DOCS_ENV) $(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8000

# jetraft as a Debian package for Debian 12 and 13 (tools/deb.py: the wheelhouse's wheels, a
# postinst that makes the virtualenv under /opt/jetraft, the unit, the jetraft user), into
# build/deb, then checked with lintian.
deb: lab-deps wheelhouse
	$(BIN)/python tools/deb.py --wheelhouse build/wheelhouse --out build/deb
	lintian --tag-display-limit 0 --fail-on error,warning build/deb/jetraft_*.deb

lab-deps:
	@dpkg -s $(LAB_DEBS) >/dev/null 2>&1 || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(LAB_DEBS); }

# Test processes: pytest-xdist workers, one per core (-n auto). On 2 cores that takes the
# suite from about 11 minutes to 7; 3 or 4 workers are no faster on an idle machine and made
# side-by-side tests with tight timeouts flaky. `make check XDIST="-n 0"` or
# `make test XDIST="-n 0"` runs a lane in one process (for a debugger, print() or pdb).
XDIST ?= -n auto

# The fast lane (under two minutes on two cores; no server, no lab): the unit tests (tests/unit), the
# RAFT simulator at its default seeds (tests/sim), and the compat tests that start no server
# (marked no_server: `-t` configuration checks side by side with nats-server's).
check: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider $(XDIST) --dist loadfile \
	  -m "not compat or no_server" tests/unit tests/sim tests/compat

# The whole suite, then the lab end to end (site.yml, testinfra, drills); the lab is removed.
# --dist loadfile keeps each file on one worker: a module's cluster or server pair, and the
# Spark session of tests/validation, start once.
test: setup lab-deps wheelhouse
	$(BIN)/python -m pytest $(XDIST) --dist loadfile --durations=25
	$(BIN)/python -m lab run

# The test helpers the bench scripts import by name (tests/servers.py, tests/cluster.py,
# tests/tls_support.py, tests/compat/...), as pyproject.toml's pytest pythonpath gives them to
# the suite; the scripts run as modules so that tests/bench/cluster.py is not `cluster`.
TEST_HELPERS := tests:tests/compat

bench: setup
	PYTHONPATH=$(TEST_HELPERS) $(BIN)/python -m tests.bench.core
	PYTHONPATH=$(TEST_HELPERS) $(BIN)/python -m tests.bench.subjects
	PYTHONPATH=$(TEST_HELPERS) $(BIN)/python -m tests.bench.raft
	PYTHONPATH=$(TEST_HELPERS) $(BIN)/python -m tests.bench.raft_storage
	PYTHONPATH=$(TEST_HELPERS) $(BIN)/python -m tests.bench.jetstream
	PYTHONPATH=$(TEST_HELPERS) $(BIN)/python -m tests.bench.cluster
	PYTHONPATH=$(TEST_HELPERS) $(BIN)/python -m tests.bench.tls
	PYTHONPATH=$(TEST_HELPERS) $(BIN)/python -m tests.bench.idle
	PYTHONPATH=$(TEST_HELPERS) $(BIN)/python -m tests.bench.validation
	PYTHONPATH=$(TEST_HELPERS) $(BIN)/python -m tests.bench.hostile
	PYTHONPATH=$(TEST_HELPERS) $(BIN)/python -m tests.bench.hostile_json
	PYTHONPATH=$(TEST_HELPERS) $(BIN)/python -m tests.bench.stream_subjects

# Where each server role spends its CPU (py-spy, a flame graph per role in build/profile):
# R3 sync, async and TLS publish and core pub/sub; PROFILE_ARGS e.g. --scenario sync.
profile: setup
	PYTHONPATH=$(TEST_HELPERS) $(BIN)/python -m tests.bench.profile $(PROFILE_ARGS)

# Every fuzz target in tests/fuzz for FUZZ_SECONDS each, one after another; crash inputs and
# logs in build/fuzz/. FUZZ_STRICT=1: the known crash classes stop a target too. The targets
# of the store's doors hold each input to 100 ms and twice an idle server's memory.
FUZZ_SECONDS ?= 600
fuzz: setup
	$(BIN)/python tests/fuzz/run.py --seconds $(FUZZ_SECONDS) $(if $(filter 1,$(FUZZ_STRICT)),--strict)

# The main job end to end; the lab stays up afterwards (python -m lab down removes it).
lab: setup lab-deps wheelhouse
	$(BIN)/python -m lab run --keep

clean:
	rm -rf $(VENV) build server/*.egg-info .pytest_cache .hypothesis
