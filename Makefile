# quartzlite: `make run` starts a node (and the API) with a demo job; `make test` runs
# lint, type check and the whole test suite against a real MySQL/MariaDB.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
Q := $(VENV)/bin/quartzlite
export QUARTZLITE_DATABASE_URL ?= mysql+pymysql://root@127.0.0.1:3306/quartzlite

.PHONY: run test lint typecheck unit integration cluster db venv clean test-faults tools

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $@

# Debian tools the tests use, as command:package pairs (a package is installed when its
# command is missing): faketime (one node's wall clock off) and stress-ng (a busy machine)
# for the fault tests and the soak; chromium and chromium-driver (command chromedriver)
# for the dashboard's browser tests (tests/ui).
TOOLS := faketime:faketime stress-ng:stress-ng chromium:chromium chromedriver:chromium-driver
tools:
	@missing=""; for pair in $(TOOLS); do \
	  command -v $${pair%%:*} >/dev/null || missing="$$missing $${pair#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

db: venv
	@PY=$(PY) ./scripts/ensure-mysql.sh

run: venv db
	$(Q) db upgrade
	$(Q) job put demo --schedule '@every 10s' \
		--command 'echo "hello from $$QUARTZLITE_JOB, planned $$QUARTZLITE_PLANNED_AT"' \
		--description 'demo job added by make run'
	$(Q) token ensure-admin --name make-run
	exec $(Q) serve

lint: venv
	$(VENV)/bin/ruff check quartzlite tests migrations bench
	$(VENV)/bin/lint-imports

typecheck: venv
	$(VENV)/bin/mypy

# pytest as two processes at once: the tests marked `cluster` (one at a time, as ever) and
# the others (scripts/test-in-two.sh); TEST_SERIAL=1 runs one process.
test: venv db tools lint typecheck
	@PY=$(PY) TEST_SERIAL=$(TEST_SERIAL) ./scripts/test-in-two.sh

unit: venv
	$(PY) -m pytest -q tests/unit

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

.PHONY: schema-sql
# sql/schema.sql (plain DDL for DBAs) from quartzlite.storage.tables; tests/migrations
# fails when it drifts from the alembic migrations.
schema-sql: venv
	$(PY) scripts/gen_schema_sql.py

# The fault suite's long variants (more kills, more cut commits, more racing writes,
# minutes-long jobs, more SIGKILLs of the node that ran a chain's first link; the broadcast
# job that loses one of its 3 nodes). Their quick variants run in `make test`.
LONG_FAULTS := -k "repeated_sigkill or unknown_outcome or racing_writes or long_job \
	or real_mysql_restart or dies_right_after or broadcast_job"

test-faults: venv db tools
	QUARTZLITE_FAULTS_LONG=1 $(PY) -m pytest -q tests/cluster/test_faults.py \
		tests/cluster/test_dependencies.py tests/cluster/test_concurrency.py $(LONG_FAULTS)

.PHONY: test-galera
# The Galera suite (not part of `make test`): a private three-member MariaDB Galera
# Cluster on loopback (tests/cluster/galera.py: mariadbd + galera-4, rsync SST; never the
# shared server), kill -9 and rejoin by IST, a partitioned member (1047), and what
# SELECT ... FOR UPDATE does across members. Installs galera-4 and rsync when missing.
GALERA_TOOLS := /usr/sbin/mariadbd:mariadb-server /usr/lib/galera/libgalera_smm.so:galera-4 \
	rsync:rsync
test-galera: venv tools
	@missing=""; for pair in $(GALERA_TOOLS); do \
	  name=$${pair%%:*}; \
	  { command -v $$name >/dev/null || test -e $$name; } || missing="$$missing $${pair#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	QUARTZLITE_GALERA=1 $(PY) -m pytest -q tests/galera

.PHONY: test-fuzz
# The API fuzz (not part of `make test`): schemathesis against a live server, its checks
# (tests/api/test_openapi_schemathesis.py says which two are left out and why),
# FUZZ_EXAMPLES examples per operation (`make test` runs 40), and the Hypothesis
# properties of schedules and job fields with as many examples, and the schedule engine
# against its references (cronsim, the Quartz evaluator) with fresh random examples
# (`make test` runs a fixed 2,000 each). Several minutes.
FUZZ_EXAMPLES ?= 2000
REFERENCE_EXAMPLES ?= 10000
test-fuzz: venv db
	QUARTZLITE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) QUARTZLITE_PROPERTY_EXAMPLES=$(FUZZ_EXAMPLES) \
	QUARTZLITE_REFERENCE_EXAMPLES=$(REFERENCE_EXAMPLES) \
		$(PY) -m pytest -q tests/api/test_openapi_schemathesis.py tests/unit/test_properties.py \
		tests/unit/test_schedule_reference.py

.PHONY: stress-test
# make test + make test-faults ROUNDS times in a row with every core kept busy by stress-ng.
ROUNDS ?= 5
stress-test: venv db tools
	./scripts/under-stress.sh $(ROUNDS)

.PHONY: soak
# The soak (issue 10): 3 real nodes and a supervisor on a PRIVATE mariadbd, ~80 jobs plus
# bursts, a seeded nemesis combining node/guard kills and freezes, partitions, database
# restarts and kill -9, one node's wall clock off (faketime), racing API writes; then the
# checker. SOAK_S seconds of faults (default 600); SOAK_SEED replays a run (printed).
SOAK_S ?= 600
SOAK_SEED ?=
soak: venv db tools
	SOAK_S=$(SOAK_S) SOAK_SEED=$(SOAK_SEED) $(PY) -m tests.soak --report $(CURDIR)/.soak.jsonl

.PHONY: reliability-report
# docs/reliability.md from a real run of the whole fault suite (long variants), the
# database-killed-mid-burst case and the soak runs collected in .soak.jsonl (make soak).
reliability-report: venv db
	rm -f .reliability.jsonl
	QUARTZLITE_FAULTS_LONG=1 QUARTZLITE_FAULT_REPORT=$(CURDIR)/.reliability.jsonl \
		$(PY) -m pytest -q tests/cluster/test_faults.py \
		tests/cluster/test_fence_outcomes.py::test_database_killed_mid_burst_never_reruns_a_finished_run
	$(PY) scripts/reliability_report.py .reliability.jsonl docs/reliability.md .soak.jsonl

.PHONY: screenshots
# docs/ui/*.png, the dashboard's pages as the README shows them: a demo cluster (a private
# qlshots_* database on the server of QUARTZLITE_DATABASE_URL, dropped afterwards; ~25
# jobs, a few hours of synthetic history, `quartzlite serve` and one more node) in
# Debian's headless Chromium (`tools` installs it). About two minutes.
screenshots: venv db tools
	$(PY) scripts/screenshots.py

.PHONY: bench
# The benchmark (not part of `make test`): the same workloads (burst, steady, failover,
# idle at scale, cost curve) on quartzlite and on APScheduler 3.11, and the dashboard's page
# speed with 100,000 jobs and 1,000,000 runs (ui), against the server of
# QUARTZLITE_DATABASE_URL in fresh qlbench_* databases (dropped afterwards). Prints the
# table, writes bench/results.json and docs/benchmarks.md. ~15 minutes; BENCH_QUICK=1
# runs shorter windows. galera: burst and steady on a 3-member Galera cluster (galera-4).
bench: venv db $(VENV)/.bench-installed
	$(PY) -m bench

$(VENV)/.bench-installed: pyproject.toml $(VENV)/.installed
	$(PY) -m pip install -q -e '.[bench]'
	@touch $@
