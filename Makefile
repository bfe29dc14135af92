# quartzlite: `make run` starts a node (and the API) with a demo job; `make test` runs
# lint, type check and the whole test suite against a real MySQL/MariaDB.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
Q := $(VENV)/bin/quartzlite
export QUARTZLITE_DATABASE_URL ?= mysql+pymysql://root@127.0.0.1:3306/quartzlite

.PHONY: run test lint typecheck unit integration cluster db venv clean test-faults

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $@

db: venv
	@PY=$(PY) ./scripts/ensure-mysql.sh

run: venv db
	$(Q) db upgrade
	$(Q) job put demo --schedule '@every 10s' \
		--command 'echo "hello from $$QUARTZLITE_JOB, planned $$QUARTZLITE_PLANNED_AT"' \
		--description 'demo job added by make run'
	exec $(Q) node

lint: venv
	$(VENV)/bin/ruff check quartzlite tests migrations
	$(VENV)/bin/lint-imports

typecheck: venv
	$(VENV)/bin/mypy

test: venv db lint typecheck
	$(PY) -m pytest -q

unit: venv
	$(PY) -m pytest -q tests/unit

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
