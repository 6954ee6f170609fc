# The two commands a newcomer needs: `make run` and `make test`. Both create .venv and install
# what they need on a machine that has only python3 and make.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check -q
PYTEST_ARGS ?=

.PHONY: run test install lint clean bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Stamps: reinstall only when the package metadata changes.
$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(PIP) install -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(PIP) install -e '.[test]'
	touch $@ $(VENV)/.installed-run

install: $(VENV)/.installed-run

## run: serve lbauth on http://127.0.0.1:8000 with an embedded SQLite database in ./var,
##      creating (once) and printing a demo user and demo app.
run: $(VENV)/.installed-run
	LBAUTH_ENV=$${LBAUTH_ENV:-development} $(BIN)/lbauth demo
	LBAUTH_ENV=$${LBAUTH_ENV:-development} exec $(BIN)/lbauth serve

## test: the whole suite, on SQLite and on PostgreSQL (LBAUTH_TEST_POSTGRES_URL, default
##       postgresql+asyncpg://postgres@127.0.0.1:5432/test; skipped if unreachable unless CI=true).
test: $(VENV)/.installed-test
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.installed-test
	$(PIP) install ruff
	$(BIN)/ruff check lbauth tests tools

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache

## bench: the benchmarks (tools/bench.py); writes bench-results.json. BENCH_ARGS=--quick for a short run.
BENCH_ARGS ?=
bench: $(VENV)/.installed-test
	$(BIN)/python tools/bench.py $(BENCH_ARGS)
