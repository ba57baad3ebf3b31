# Every set-up step is a target here, idempotent, so that `make demo` and `make test`
# work on a fresh clone. Dependencies come from requirements.lock through uv, whose cache
# (~/.cache/uv) makes repeated set-ups of the multi-GB torch build take seconds. Bytecode is
# compiled at install: where PYTHONDONTWRITEBYTECODE is set, every rank would otherwise
# compile torch from source at each start, a slower `import torch` (docs/demo.md has the times).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat requirements.lock pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: setup kafka alertmanager prometheus multihost unit test demo lint lock bench clean

setup: $(STAMP)

$(STAMP): requirements.lock pyproject.toml bus/_tagcheck.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@test -x $(BIN)/uv || $(BIN)/pip install --quiet --disable-pip-version-check uv
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -r requirements.lock
	@command -v cc >/dev/null || command -v gcc >/dev/null || { echo "The install builds bus/_tagcheck.c: install a C compiler (e.g. apt-get install gcc)"; exit 1; }
	@$(BIN)/python -c "import os, sys, sysconfig; h = os.path.join(sysconfig.get_paths()['include'], 'Python.h'); os.path.exists(h) or sys.exit(f'The install builds bus/_tagcheck.c and needs {h}: install the Python headers (e.g. apt-get install python3-dev)')"
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e .
	@rm -f $(VENV)/.installed-*
	@touch $@

# The pinned Kafka jars (compose/pom.xml), copied once from Maven Central (cached in ~/.m2).
kafka: setup
	@command -v java >/dev/null || { echo "Java 17+ is needed to run Kafka: install a JDK (e.g. apt-get install openjdk-17-jre-headless)"; exit 1; }
	@$(BIN)/trainmedic broker fetch >/dev/null

# The alert bridge's tests run a real Alertmanager: Debian's prometheus-alertmanager, installed once.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
alertmanager:
	@command -v prometheus-alertmanager >/dev/null || command -v alertmanager >/dev/null || { \
	  command -v apt-get >/dev/null || { echo "The alert tests need Alertmanager and apt-get is not available:" \
	    "install Alertmanager 0.25+ as prometheus-alertmanager or alertmanager on PATH"; exit 1; }; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus-alertmanager \
	  || { $(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	       apt-get install -y --no-install-recommends prometheus-alertmanager; }; }

# Prometheus and promtool for the rules' tests and the Prometheus integration test (and `demo --observe`):
# Debian's prometheus package, unpacked once into .trainmedic/prometheus of this checkout (apt-get
# download + dpkg -x: nothing installed system-wide, no service started), unless both are on PATH.
PROM_HOME := .trainmedic/prometheus
prometheus:
	@{ command -v prometheus >/dev/null && command -v promtool >/dev/null; } || test -x $(PROM_HOME)/usr/bin/promtool || { \
	  command -v apt-get >/dev/null || { echo "The Prometheus tests need prometheus and promtool and apt-get is" \
	    "not available: install Prometheus 2.42+ with both on PATH"; exit 1; }; \
	  tmp=$$(mktemp -d) && cd $$tmp && { apt-get download prometheus >/dev/null 2>&1 \
	    || { $(SUDO) apt-get update >/dev/null && apt-get download prometheus; }; } && cd - >/dev/null \
	  && mkdir -p $(PROM_HOME) && dpkg -x $$tmp/prometheus_*.deb $(PROM_HOME) && rm -rf $$tmp \
	  && $(PROM_HOME)/usr/bin/prometheus --version | head -1; }

# The multi-host bed's tools (tests/multihost): nftables, for partitions, and Slurm with munge, for the
# Slurm tests (which run their own daemons from the bed's files; on a host with systemd the packages'
# own services may start too); Debian's packages, installed once where the user is root (elsewhere
# those tests skip, saying why).
BED_TOOLS := nft:nftables slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge
multihost:
	@[ "$$(id -u)" != 0 ] || { missing=$$(for t in $(BED_TOOLS); do command -v $${t%%:*} >/dev/null || \
	    echo $${t#*:}; done); [ -z "$$missing" ] || { \
	  command -v apt-get >/dev/null || { echo "The multi-host tests need $$missing and apt-get is not" \
	    "available: install them"; exit 1; }; \
	  env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing \
	  || { apt-get update && env DEBIAN_FRONTEND=noninteractive \
	       apt-get install -y --no-install-recommends $$missing; }; }; }

# The fast tier: pure cores, the layering check, no broker (seconds).
unit: setup
	$(BIN)/python -m pytest tests/unit

# The README's test command: the unit tier first, then everything against a real broker, which it
# starts (and stops) itself unless TRAINMEDIC_KAFKA_BOOTSTRAP names one, then the multi-host bed
# (hosts as network namespaces, with a broker of their own).
# The suite's broker and state stay in this checkout (tests/conftest.py does the same for a bare pytest),
# apart from the user's own home (~/.local/state/trainmedic) that `make demo` and `trainmedic run` use.
# The 25 slowest tests are named at the end: what to look at when the run grows past its budget.
test: export TRAINMEDIC_HOME ?= $(CURDIR)/.trainmedic
test: setup kafka alertmanager prometheus multihost
	$(BIN)/python -m pytest tests/unit tests/integration tests/multihost --durations=25

# The README's main command.
demo: setup kafka
	$(BIN)/trainmedic demo

# Style, and the layering contract of pyproject.toml (every import points down).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports

# Re-resolve the pinned dependency set after changing pyproject.toml.
lock:
	@test -x $(BIN)/uv || { $(PYTHON) -m venv $(VENV) && $(BIN)/pip install --quiet uv; }
	$(BIN)/uv pip compile --quiet --python-version 3.11 --extra test pyproject.toml -o requirements.lock

# Every benchmark, each printing its numbers. Those that need Kafka use the local broker,
# started here if it is not running (and left running: `trainmedic broker stop`), unless
# TRAINMEDIC_KAFKA_BOOTSTRAP names another; bench/detector_live.py starts a broker of its own,
# bench/tls_cost.py two (a plain and a TLS one).
bench: setup kafka
	@[ -n "$$TRAINMEDIC_KAFKA_BOOTSTRAP" ] || $(BIN)/trainmedic broker start >/dev/null
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	-$(BIN)/trainmedic broker stop
	rm -rf $(VENV) .trainmedic .pytest_cache .hypothesis .ruff_cache .import_linter_cache
